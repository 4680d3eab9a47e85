output "primary_endpoint" {
  description = "Host name of the primary (follows failover)."
  value       = aws_elasticache_replication_group.this.primary_endpoint_address
}

output "port" {
  description = "Port of the cache."
  value       = aws_elasticache_replication_group.this.port
}

output "security_group_id" {
  description = "Security group of the cache."
  value       = aws_security_group.this.id
}

output "replication_group_id" {
  description = "Replication group id (alarms, operations)."
  value       = aws_elasticache_replication_group.this.id
}
