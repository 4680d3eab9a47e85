variable "name" {
  description = "Name prefix of every resource (e.g. mqtt-prod)."
  type        = string
}

variable "region" {
  description = "AWS region (for the S3 gateway endpoint's service name)."
  type        = string
}

variable "cidr" {
  description = "CIDR block of the VPC (a /16 is cut into /20 subnets)."
  type        = string
  default     = "10.40.0.0/16"
}

variable "az_count" {
  description = "Availability zones to spread subnets over."
  type        = number
  default     = 3

  validation {
    condition     = var.az_count >= 2 && var.az_count <= 4
    error_message = "az_count must be between 2 and 4 (Multi-AZ database and cache need 2)."
  }
}

variable "azs" {
  description = "Zone names to use (empty: the region's a, b, c, d zones that are available)."
  type        = list(string)
  default     = []
}

variable "single_nat_gateway" {
  description = "One NAT gateway for all zones (cheaper, for dev) instead of one per zone."
  type        = bool
  default     = false
}

variable "flow_log_retention_days" {
  description = "Days VPC flow logs are kept."
  type        = number
  default     = 365
}

variable "flow_log_kms_key_arn" {
  description = "KMS key encrypting the flow log group (the observability module's logs key)."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
