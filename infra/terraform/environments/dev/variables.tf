variable "region" {
  description = "AWS region."
  type        = string
  default     = "eu-west-1"
}

variable "image" {
  description = "The platform image (docker/Dockerfile) in ECR, by digest (…@sha256:…) or immutable tag."
  type        = string
}

variable "portal_host" {
  description = "Host name of the portal and REST API (e.g. portal.example.com)."
  type        = string
}

variable "portal_certificate_arn" {
  description = "ACM certificate of portal_host (in this region)."
  type        = string
}

variable "mqtt_host" {
  description = "Host name devices connect to (e.g. mqtt.example.com)."
  type        = string
}

variable "mqtt_certificate_arn" {
  description = "ACM certificate of mqtt_host (in this region)."
  type        = string
}

variable "alarm_emails" {
  description = "Addresses the alarms are sent to."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

variable "spark_runner" {
  description = "local (Spark in the workers) or emr-serverless (the workers submit the jobs to EMR Serverless)."
  type        = string
  default     = "local"
}

variable "spark_code_version" {
  description = "VERSION of the uploaded Spark code package (python -m spark.package upload); needed by emr-serverless."
  type        = string
  default     = ""
}

variable "spark_image_uri" {
  description = "EMR Serverless image built from docker/Dockerfile.spark-emr (tag starting with emr-spark-8.0.0); needed by emr-serverless."
  type        = string
  default     = null
}
