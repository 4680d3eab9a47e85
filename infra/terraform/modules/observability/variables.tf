variable "name" {
  description = "Name prefix of every resource (e.g. mqtt-prod)."
  type        = string
}

variable "region" {
  description = "AWS region (the logs service principal of the KMS key policy)."
  type        = string
}

variable "log_retention_days" {
  description = "Days every role's logs are kept."
  type        = number
  default     = 365
}

variable "alarm_emails" {
  description = "Addresses subscribed to the alarm topic (each confirms by email)."
  type        = list(string)
  default     = []
}

variable "nlb_arn_suffix" {
  description = "ARN suffix of the brokers' NLB (broker module)."
  type        = string
}

variable "broker_target_group_arn_suffixes" {
  description = "ARN suffixes of the brokers' target groups by listener (broker module)."
  type        = map(string)
}

variable "broker_connections_threshold" {
  description = "Average TLS flows (MQTT connections) on the NLB that pages the operator."
  type        = number
  default     = 50000
}

variable "alb_arn_suffix" {
  description = "ARN suffix of the portal's ALB (web module)."
  type        = string
}

variable "web_5xx_threshold" {
  description = "Server errors per 5 minutes from the portal/API that page the operator."
  type        = number
  default     = 10
}

variable "logged_errors_threshold" {
  description = "ERROR lines per 5 minutes in one role's log that page the operator."
  type        = number
  default     = 20
}

variable "db_instance_identifier" {
  description = "Identifier of the RDS instance (database module)."
  type        = string
}

variable "db_cpu_threshold" {
  description = "Database CPU percentage that pages the operator."
  type        = number
  default     = 80
}

variable "db_free_storage_threshold_gb" {
  description = "Database free storage (GB) below which the operator is paged."
  type        = number
  default     = 10
}

variable "queue_lag_minutes" {
  description = "Minutes without a periodic task completing through the Celery queue before the alarm."
  type        = number
  default     = 5
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
