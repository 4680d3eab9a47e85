variable "name" {
  description = "Name prefix and DB instance identifier (e.g. mqtt-prod)."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the database (network module)."
  type        = string
}

variable "subnet_ids" {
  description = "Data subnets in at least two zones (network module)."
  type        = list(string)
}

variable "allowed_security_group_ids" {
  description = "Security groups of the tasks that may connect (web, broker, workers, spark)."
  type        = list(string)
}

variable "major_version" {
  description = "PostgreSQL major version (the parameter group's family)."
  type        = string
  default     = "16"
}

variable "engine_version" {
  description = "PostgreSQL engine version (minor upgrades are applied automatically)."
  type        = string
  default     = "16.4"
}

variable "instance_class" {
  description = "RDS instance class."
  type        = string
}

variable "database_name" {
  description = "Name of the platform's database."
  type        = string
  default     = "platform"
}

variable "username" {
  description = "Master user name (its password is managed by RDS in Secrets Manager)."
  type        = string
  default     = "platform"
}

variable "allocated_storage_gb" {
  description = "Initial storage in GB."
  type        = number
  default     = 100
}

variable "max_allocated_storage_gb" {
  description = "Storage autoscaling ceiling in GB."
  type        = number
  default     = 1000
}

variable "multi_az" {
  description = "A synchronous standby in another zone with automatic failover."
  type        = bool
  default     = true
}

variable "backup_retention_days" {
  description = "Days of automated backups (point-in-time restore window)."
  type        = number
  default     = 14
}

variable "deletion_protection" {
  description = "Refuse to delete the instance (turn off deliberately before a destroy)."
  type        = bool
  default     = true
}

variable "log_min_duration_ms" {
  description = "Statements slower than this are logged (milliseconds)."
  type        = number
  default     = 500
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
