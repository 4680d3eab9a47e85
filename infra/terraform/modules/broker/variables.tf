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
  description = "Subnets of the NLB, one per zone (network module)."
  type        = list(string)
}

variable "private_subnet_ids" {
  description = "Subnets of the broker tasks (network module); tasks get no public IP."
  type        = list(string)
}

variable "client_cidr" {
  description = "Addresses devices connect from."
  type        = string
  default     = "0.0.0.0/0"
}

variable "internal_client_security_group_ids" {
  description = "Security groups allowed to reach brokers directly on 1883 (the portal's live views)."
  type        = list(string)
  default     = []
}

variable "certificate_arn" {
  description = "ACM certificate of the MQTT host name (e.g. mqtt.example.com)."
  type        = string
}

variable "ssl_policy" {
  description = "TLS policy of the listeners (TLS 1.3 and 1.2 only)."
  type        = string
  default     = "ELBSecurityPolicy-TLS13-1-2-2021-06"
}

variable "access_logs_bucket" {
  description = "Bucket receiving the NLB's access logs under lb/mqtt (storage module)."
  type        = string
}

variable "deletion_protection" {
  description = "Refuse to delete the NLB (its address is what devices know)."
  type        = bool
  default     = true
}

variable "cluster_arn" {
  description = "ECS cluster (cluster module)."
  type        = string
}

variable "cluster_name" {
  description = "Name of the ECS cluster (autoscaling and Container Insights dimensions)."
  type        = string
}

variable "service_connect_namespace_arn" {
  description = "Service Connect namespace (cluster module) in which brokers answer as broker:1883."
  type        = string
}

variable "image" {
  description = "The platform image (docker/Dockerfile)."
  type        = string
}

variable "cpu" {
  description = "Fargate CPU units per broker task (one broker process uses one core)."
  type        = number
  default     = 1024
}

variable "memory" {
  description = "Fargate memory per broker task in MiB."
  type        = number
  default     = 2048
}

variable "min_count" {
  description = "Fewest broker tasks (at least one per zone in production)."
  type        = number
  default     = 2
}

variable "max_count" {
  description = "Most broker tasks autoscaling may run."
  type        = number
  default     = 10
}

variable "cpu_target_percent" {
  description = "Average CPU the service scales to keep."
  type        = number
  default     = 60
}

variable "connections_per_task_target" {
  description = "MQTT connections per broker task the service scales to keep."
  type        = number
  default     = 20000
}

variable "execution_role_arn" {
  description = "Execution role (iam module)."
  type        = string
}

variable "task_role_arn" {
  description = "Task role of the broker (iam module)."
  type        = string
}

variable "environment" {
  description = "Plain environment of the broker process (DATABASE_URL, OBJECT_STORE_URL, …)."
  type        = map(string)
}

variable "secrets" {
  description = "Environment from Secrets Manager (PGPASSWORD, REDIS_URL, MQTT_SERVICE_KEY)."
  type        = map(string)
}

variable "log_group_name" {
  description = "Log group of the broker (observability module)."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
