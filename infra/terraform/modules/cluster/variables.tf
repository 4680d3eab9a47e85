variable "name" {
  description = "Name of the ECS cluster (e.g. mqtt-prod)."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key encrypting ECS Exec sessions (the observability module's key)."
  type        = string
}

variable "exec_log_group_name" {
  description = "Log group recording ECS Exec sessions (an audit trail of operator shells)."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
