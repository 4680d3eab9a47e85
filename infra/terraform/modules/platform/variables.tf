variable "environment" {
  description = "Environment name (names every resource mqtt-ENVIRONMENT)."
  type        = string
}

variable "region" {
  description = "AWS region (the one the calling environment's provider is configured for)."
  type        = string
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

variable "vpc_cidr" {
  description = "CIDR block of the VPC."
  type        = string
  default     = "10.50.0.0/16"
}

variable "single_nat_gateway" {
  description = "One NAT gateway for all zones (cheaper, no zone redundancy for egress)."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Protect the database and load balancers from deletion."
  type        = bool
  default     = false
}

variable "log_retention_days" {
  description = "Days logs are kept."
  type        = number
  default     = 365
}

variable "secret_recovery_window_days" {
  description = "Days a deleted secret can be restored."
  type        = number
  default     = 7
}

variable "archive_infrequent_access_after_days" {
  description = "Days before archive objects move to Standard-IA."
  type        = number
  default     = 30
}

variable "archive_glacier_after_days" {
  description = "Days before archive objects move to Glacier."
  type        = number
  default     = 90
}

variable "db_instance_class" {
  description = "RDS instance class."
  type        = string
  default     = "db.t4g.medium"
}

variable "db_allocated_storage_gb" {
  description = "Initial database storage in GB."
  type        = number
  default     = 50
}

variable "db_multi_az" {
  description = "A standby database in another zone."
  type        = bool
  default     = true
}

variable "db_backup_retention_days" {
  description = "Days of point-in-time recovery."
  type        = number
  default     = 7
}

variable "cache_node_type" {
  description = "ElastiCache node type."
  type        = string
  default     = "cache.t4g.small"
}

variable "cache_nodes" {
  description = "Redis nodes (primary + replicas, at least 2)."
  type        = number
  default     = 2
}

variable "web_cpu" {
  description = "CPU units per web task."
  type        = number
  default     = 512
}

variable "web_memory" {
  description = "Memory per web task (MiB)."
  type        = number
  default     = 1024
}

variable "web_min_count" {
  description = "Fewest web tasks."
  type        = number
  default     = 1
}

variable "web_max_count" {
  description = "Most web tasks."
  type        = number
  default     = 2
}

variable "broker_cpu" {
  description = "CPU units per broker task (one broker process per core)."
  type        = number
  default     = 1024
}

variable "broker_memory" {
  description = "Memory per broker task (MiB)."
  type        = number
  default     = 2048
}

variable "broker_min_count" {
  description = "Fewest broker tasks (one per zone at least)."
  type        = number
  default     = 1
}

variable "broker_max_count" {
  description = "Most broker tasks."
  type        = number
  default     = 2
}

variable "broker_connections_per_task" {
  description = "MQTT connections per broker task the service scales to keep."
  type        = number
  default     = 20000
}

variable "broker_connections_alarm" {
  description = "Total MQTT connections that page the operator."
  type        = number
  default     = 20000
}

variable "worker_cpu" {
  description = "CPU units per Celery worker task."
  type        = number
  default     = 512
}

variable "worker_memory" {
  description = "Memory per Celery worker task (MiB)."
  type        = number
  default     = 2048
}

variable "worker_min_count" {
  description = "Fewest Celery worker tasks."
  type        = number
  default     = 1
}

variable "worker_max_count" {
  description = "Most Celery worker tasks."
  type        = number
  default     = 2
}

variable "rules_cpu" {
  description = "CPU units of the live rules job and the billing task (Spark local mode)."
  type        = number
  default     = 2048
}

variable "rules_memory" {
  description = "Memory of the live rules job and the billing task (MiB)."
  type        = number
  default     = 8192
}

variable "spark_max_vcpu" {
  description = "EMR Serverless vCPU ceiling (cost cap)."
  type        = string
  default     = "16 vCPU"
}

variable "spark_max_memory" {
  description = "EMR Serverless memory ceiling (cost cap)."
  type        = string
  default     = "64 GB"
}

variable "spark_runner" {
  description = "Where the workers run the Spark jobs of tenants' runs over history, backfills and billing: local (in the worker, Spark local mode) or emr-serverless (submitted to the spark module's application; needs spark_code_version and spark_image_uri)."
  type        = string
  default     = "local"

  validation {
    condition     = contains(["local", "emr-serverless"], var.spark_runner)
    error_message = "spark_runner is local or emr-serverless."
  }
}

variable "spark_code_version" {
  description = "Version of the jobs' code package on S3 (the VERSION python -m spark.package upload printed: SPARK_CODE_URI=…/spark-code/VERSION/); empty: none uploaded."
  type        = string
  default     = ""
}

variable "spark_image_uri" {
  description = "EMR Serverless image with the jobs' Python requirements (docker/Dockerfile.spark-emr), its tag starting with the release label; null: EMR's own image, whose Python lacks them."
  type        = string
  default     = null

  validation {
    # Built FROM the release's base image, it runs that release's Spark: the one pyspark pins.
    condition     = var.spark_image_uri == null || can(regex(":emr-spark-8\\.0\\.[0-9]+-[^:/]+$", var.spark_image_uri))
    error_message = "Tag the image emr-spark-8.0.N-VERSION: it must be built on the release the spark module deploys (docker/Dockerfile.spark-emr)."
  }
}
