variable "name" {
  description = "Name prefix of every resource (e.g. mqtt-prod)."
  type        = string
}

variable "vpc_id" {
  description = "VPC (network module)."
  type        = string
}

variable "private_subnet_ids" {
  description = "Subnets of the Spark workers (network module)."
  type        = list(string)
}

variable "release_label" {
  description = "EMR Serverless release of the application: its Spark must be the minor pyproject.toml pins (emr-spark-8.0.0 runs Spark 4.0.2; spark/versions.py)."
  type        = string
  default     = "emr-spark-8.0.0"

  validation {
    # The jobs are tested on pyspark 4.0.x only: a release of another Spark fails at run time.
    condition     = can(regex("^emr-spark-8\\.0\\.[0-9]+$", var.release_label))
    error_message = "The Spark jobs are tested on Spark 4.0 (pyproject.toml pins pyspark 4.0.x): use an emr-spark-8.0.x release, or move the pin and this label together (infra/README.md)."
  }
}

variable "architecture" {
  description = "X86_64 or ARM64."
  type        = string
  default     = "X86_64"
}

variable "image_uri" {
  description = "Custom image (EMR Serverless base + the platform's spark/ and common/) in ECR; null uses EMR's."
  type        = string
  default     = null
}

variable "max_vcpu" {
  description = "Ceiling of the application's vCPU across all running jobs (cost cap), e.g. \"64 vCPU\"."
  type        = string
  default     = "64 vCPU"
}

variable "max_memory" {
  description = "Ceiling of the application's memory across all running jobs, e.g. \"256 GB\"."
  type        = string
  default     = "256 GB"
}

variable "data_bucket_arn" {
  description = "ARN of the data bucket (storage module)."
  type        = string
}

variable "data_kms_key_arn" {
  description = "KMS key of the data bucket (storage module)."
  type        = string
}

variable "read_prefixes" {
  description = "Prefixes of the data bucket the jobs read (the archive and the usage log)."
  type        = list(string)
  default     = ["archive/", "usage/"]
}

variable "write_prefixes" {
  description = "Prefixes the jobs write (rule outputs, checkpoints, datasets, their reports under rules/jobs/ and billing/jobs/). The code package (code_prefix) is read only."
  type        = list(string)
  default     = ["rules/", "datasets/", "billing/"]
}

variable "code_prefix" {
  description = "Prefix of the data bucket the jobs' code package is uploaded under (python -m spark.package upload); the job role may read it, never write it."
  type        = string
  default     = "spark-code/"

  validation {
    condition     = can(regex("^[a-z0-9-]+/$", var.code_prefix))
    error_message = "A single prefix ending in /, e.g. spark-code/."
  }
}

variable "database_secret_arn" {
  description = "Secret of the database credentials the jobs load results with (database module)."
  type        = string
}

variable "database_secret_kms_key_arn" {
  description = "KMS key of that secret (database module)."
  type        = string
}

variable "log_group_name" {
  description = "Log group of the job runs (observability module)."
  type        = string
}

variable "log_group_arn" {
  description = "ARN of that log group."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
