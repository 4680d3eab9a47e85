variable "alias" {
  description = "The key's alias without the `alias/` prefix, e.g. NAME-database."
  type        = string
}

variable "description" {
  description = "What the key encrypts (shown in the KMS console)."
  type        = string
}

variable "policy_documents" {
  description = "Key policy documents (JSON) merged with the account-root statement: the services that use the key directly."
  type        = list(string)
  default     = []
}

variable "deletion_window_in_days" {
  description = "Days a scheduled deletion of the key may still be cancelled (7 to 30)."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags for the key."
  type        = map(string)
  default     = {}
}
