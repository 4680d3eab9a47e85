variable "name" {
  description = "Name prefix of the buckets (NAME-data-ACCOUNT, NAME-logs-ACCOUNT)."
  type        = string
}

variable "archive_infrequent_access_after_days" {
  description = "Days after which archive objects move to S3 Standard-IA."
  type        = number
  default     = 30
}

variable "archive_glacier_after_days" {
  description = "Days after which archive objects move to S3 Glacier Flexible Retrieval."
  type        = number
  default     = 180
}

variable "archive_expire_after_days" {
  description = "Days after which archive objects are deleted (null keeps them)."
  type        = number
  default     = null
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object's old version is kept (the undo window)."
  type        = number
  default     = 30
}

variable "log_retention_days" {
  description = "Days access logs are kept."
  type        = number
  default     = 365
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
