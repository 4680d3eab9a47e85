variable "name" {
  description = "Name prefix of every role (e.g. mqtt-prod)."
  type        = string
}

variable "account_id" {
  description = "AWS account id (the trust policies accept tasks of this account only)."
  type        = string
}

variable "data_bucket_arn" {
  description = "ARN of the data bucket (storage module)."
  type        = string
}

variable "data_kms_key_arn" {
  description = "KMS key of the data bucket (storage module)."
  type        = string
}

variable "s3_access" {
  description = "S3 prefixes of the data bucket each role may read, write and delete."
  type = map(object({
    read   = list(string)
    write  = list(string)
    delete = list(string)
  }))
  default = {
    web     = { read = ["datasets/", "invoices/"], write = [], delete = [] }
    broker  = { read = ["payloads/"], write = ["archive/", "usage/", "payloads/"], delete = ["payloads/"] }
    worker  = { read = ["archive/", "usage/", "datasets/", "invoices/"], write = ["datasets/", "invoices/"], delete = [] }
    rules   = { read = ["archive/", "rules/"], write = ["datasets/", "rules/"], delete = ["rules/"] }
    billing = { read = ["usage/", "billing/"], write = ["invoices/", "billing/"], delete = ["billing/"] }
  }
}

variable "secret_arns" {
  description = "Secrets the execution role may read to fill the tasks' environment."
  type        = list(string)
}

variable "secret_kms_key_arns" {
  description = "KMS keys of those secrets."
  type        = list(string)
}

variable "emr_application_arn" {
  description = "EMR Serverless application the worker submits Spark jobs to (null: none)."
  type        = string
  default     = null
}

variable "emr_job_role_arn" {
  description = "Job role the worker passes to EMR Serverless."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
