variable "name" {
  description = "Name prefix of every resource (e.g. mqtt-prod)."
  type        = string
}

variable "region" {
  description = "AWS region (the tasks' log configuration)."
  type        = string
}

variable "vpc_id" {
  description = "VPC (network module)."
  type        = string
}

variable "private_subnet_ids" {
  description = "Subnets of the tasks (network module); tasks get no public IP."
  type        = list(string)
}

variable "cluster_arn" {
  description = "ECS cluster (cluster module)."
  type        = string
}

variable "cluster_name" {
  description = "Name of the ECS cluster (autoscaling)."
  type        = string
}

variable "image" {
  description = "The platform image (docker/Dockerfile)."
  type        = string
}

variable "worker_cpu" {
  description = "Fargate CPU units per Celery worker task."
  type        = number
  default     = 1024
}

variable "worker_memory" {
  description = "Fargate memory per Celery worker task in MiB."
  type        = number
  default     = 2048
}

variable "worker_min_count" {
  description = "Fewest Celery worker tasks."
  type        = number
  default     = 1
}

variable "worker_max_count" {
  description = "Most Celery worker tasks autoscaling may run."
  type        = number
  default     = 4
}

variable "rules_enabled" {
  description = "Run the live rules job (one task)."
  type        = bool
  default     = true
}

variable "rules_cpu" {
  description = "Fargate CPU units of the live rules job (Spark local mode uses every core)."
  type        = number
  default     = 2048
}

variable "rules_memory" {
  description = "Fargate memory of the live rules job in MiB."
  type        = number
  default     = 8192
}

variable "execution_role_arn" {
  description = "Execution role (iam module)."
  type        = string
}

variable "task_role_arns" {
  description = "Task roles by role of the table of processes (iam module): worker, beat, rules."
  type        = map(string)
}

variable "environment" {
  description = "Plain environment of the processes."
  type        = map(string)
}

variable "secrets" {
  description = "Environment from Secrets Manager (SECRET_KEY, PGPASSWORD, REDIS_URL, …)."
  type        = map(string)
}

variable "log_group_names" {
  description = "Log groups by role (observability module)."
  type        = map(string)
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
