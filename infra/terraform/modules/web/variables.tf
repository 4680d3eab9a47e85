variable "name" {
  description = "Name prefix of every resource (e.g. mqtt-prod)."
  type        = string
}

variable "region" {
  description = "AWS region (the task's log configuration)."
  type        = string
}

variable "vpc_id" {
  description = "VPC (network module)."
  type        = string
}

variable "public_subnet_ids" {
  description = "Subnets of the ALB, one per zone (network module)."
  type        = list(string)
}

variable "private_subnet_ids" {
  description = "Subnets of the web tasks (network module); tasks get no public IP."
  type        = list(string)
}

variable "client_cidr" {
  description = "Addresses browsers and API clients come from."
  type        = string
  default     = "0.0.0.0/0"
}

variable "certificate_arn" {
  description = "ACM certificate of the portal's host name."
  type        = string
}

variable "ssl_policy" {
  description = "TLS policy of the HTTPS listener (TLS 1.3 and 1.2 only)."
  type        = string
  default     = "ELBSecurityPolicy-TLS13-1-2-2021-06"
}

variable "access_logs_bucket" {
  description = "Bucket receiving the ALB's access logs under lb/web (storage module)."
  type        = string
}

variable "waf_log_group_arn" {
  description = "Log group of the WAF (observability module)."
  type        = string
}

variable "rate_limit_per_5_minutes" {
  description = "Requests per client address per 5 minutes before the WAF blocks it."
  type        = number
  default     = 2000
}

variable "deletion_protection" {
  description = "Refuse to delete the ALB."
  type        = bool
  default     = true
}

variable "cluster_arn" {
  description = "ECS cluster (cluster module)."
  type        = string
}

variable "cluster_name" {
  description = "Name of the ECS cluster (autoscaling)."
  type        = string
}

variable "service_connect_namespace_arn" {
  description = "Service Connect namespace (cluster module) the web tasks find the brokers in."
  type        = string
}

variable "image" {
  description = "The platform image (docker/Dockerfile)."
  type        = string
}

variable "cpu" {
  description = "Fargate CPU units per web task."
  type        = number
  default     = 512
}

variable "memory" {
  description = "Fargate memory per web task in MiB."
  type        = number
  default     = 1024
}

variable "min_count" {
  description = "Fewest web tasks."
  type        = number
  default     = 2
}

variable "max_count" {
  description = "Most web tasks autoscaling may run."
  type        = number
  default     = 6
}

variable "execution_role_arn" {
  description = "Execution role (iam module)."
  type        = string
}

variable "task_role_arn" {
  description = "Task role of the web process (iam module)."
  type        = string
}

variable "environment" {
  description = "Plain environment of the web process."
  type        = map(string)
}

variable "secrets" {
  description = "Environment from Secrets Manager (SECRET_KEY, PGPASSWORD, REDIS_URL, MQTT_SERVICE_KEY, SEALING_KEY)."
  type        = map(string)
}

variable "log_group_name" {
  description = "Log group of the web role (observability module)."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
