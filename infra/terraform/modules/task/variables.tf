variable "name" {
  description = "Name prefix of the deployment (e.g. mqtt-prod); the family is NAME-ROLE."
  type        = string
}

variable "role" {
  description = "The role of the table of processes (common/runtime/processes.py) this task runs."
  type        = string

  validation {
    condition     = contains(["web", "broker", "worker", "beat", "rules", "billing", "migrate"], var.role)
    error_message = "role must be one of web, broker, worker, beat, rules, billing, migrate (common/runtime/processes.py)."
  }
}

variable "image" {
  description = "The platform image (docker/Dockerfile), by digest or immutable tag."
  type        = string
}

variable "cpu" {
  description = "Fargate CPU units of the task (1024 = 1 vCPU)."
  type        = number
}

variable "memory" {
  description = "Fargate memory of the task in MiB."
  type        = number
}

variable "cpu_architecture" {
  description = "X86_64 or ARM64 (the image must be built for it)."
  type        = string
  default     = "X86_64"
}

variable "execution_role_arn" {
  description = "Role ECS uses to pull the image, write logs and read the task's secrets."
  type        = string
}

variable "task_role_arn" {
  description = "Role the process itself runs as (one per role, see the iam module)."
  type        = string
}

variable "environment" {
  description = "Plain (non-secret) environment variables of the container."
  type        = map(string)
  default     = {}
}

variable "secrets" {
  description = "Environment variables filled from Secrets Manager: name => secret ARN (or ARN:json-key::)."
  type        = map(string)
  default     = {}
}

variable "container_ports" {
  description = "TCP ports the container listens on, by name (Service Connect refers to the names)."
  type        = map(number)
  default     = {}
}

variable "health_check" {
  description = "Whether ECS runs the role's health probe (off for jobs, whose exit status counts)."
  type        = bool
  default     = true
}

variable "health_check_start_period" {
  description = "Seconds after start before a failing probe counts."
  type        = number
  default     = 60
}

variable "stop_timeout" {
  description = "Seconds between SIGTERM and SIGKILL (brokers drain and redirect clients meanwhile)."
  type        = number
  default     = 30
}

variable "log_group_name" {
  description = "CloudWatch log group of the role (observability module)."
  type        = string
}

variable "region" {
  description = "AWS region of the log group."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
