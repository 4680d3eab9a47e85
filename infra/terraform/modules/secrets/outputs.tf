output "kms_key_arn" {
  description = "KMS key of the secrets (the execution role needs kms:Decrypt on it)."
  value       = module.kms.arn
}

output "django_secret_key_arn" {
  description = "Secret holding SECRET_KEY."
  value       = aws_secretsmanager_secret.generated["django-secret-key"].arn
}

output "service_key_arn" {
  description = "Secret holding MQTT_SERVICE_KEY."
  value       = aws_secretsmanager_secret.generated["service-key"].arn
}

output "sealing_key_arn" {
  description = "Secret holding SEALING_KEY."
  value       = aws_secretsmanager_secret.generated["sealing-key"].arn
}

output "redis_auth_token_arn" {
  description = "Secret holding the cache's AUTH token."
  value       = aws_secretsmanager_secret.generated["redis-auth-token"].arn
}

output "redis_auth_token" {
  description = "The cache's AUTH token (for the cache module; kept in the encrypted state)."
  value       = aws_secretsmanager_secret_version.generated["redis-auth-token"].secret_string
  sensitive   = true
}

output "redis_url_arn" {
  description = "Secret holding REDIS_URL."
  value       = aws_secretsmanager_secret.redis_url.arn
}

output "secret_arns" {
  description = "Every secret of this module (what the execution role may read)."
  value = concat(
    [for secret in aws_secretsmanager_secret.generated : secret.arn],
    [aws_secretsmanager_secret.redis_url.arn],
  )
}
