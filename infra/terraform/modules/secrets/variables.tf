variable "name" {
  description = "Name prefix of every resource (e.g. mqtt-prod)."
  type        = string
}

variable "redis_endpoint" {
  description = "Primary endpoint of the cache (cache module), for REDIS_URL."
  type        = string
}

variable "redis_port" {
  description = "Port of the cache."
  type        = number
  default     = 6379
}

variable "recovery_window_in_days" {
  description = "Days a deleted secret can be restored (0 deletes at once: dev only)."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
