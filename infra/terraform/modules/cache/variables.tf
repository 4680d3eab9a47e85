variable "name" {
  description = "Name prefix and replication group id (e.g. mqtt-prod)."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the cache (network module)."
  type        = string
}

variable "subnet_ids" {
  description = "Data subnets in at least two zones (network module)."
  type        = list(string)
}

variable "allowed_security_group_ids" {
  description = "Security groups of the tasks that may connect."
  type        = list(string)
}

variable "engine_version" {
  description = "Redis engine version."
  type        = string
  default     = "7.1"
}

variable "node_type" {
  description = "ElastiCache node type."
  type        = string
}

variable "num_cache_clusters" {
  description = "Nodes in the replication group: a primary and replicas (at least 2 for Multi-AZ failover)."
  type        = number
  default     = 2

  validation {
    condition     = var.num_cache_clusters >= 2
    error_message = "Multi-AZ automatic failover needs at least 2 nodes."
  }
}

variable "auth_token" {
  description = "AUTH token clients present over TLS (secrets module)."
  type        = string
  sensitive   = true
}

variable "snapshot_retention_days" {
  description = "Days of daily snapshots."
  type        = number
  default     = 7
}

variable "slow_log_group_name" {
  description = "CloudWatch log group receiving Redis's slow log."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
