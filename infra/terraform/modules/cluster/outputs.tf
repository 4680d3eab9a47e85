output "arn" {
  description = "ARN of the ECS cluster."
  value       = aws_ecs_cluster.this.arn
}

output "service_connect_namespace_arn" {
  description = "Service Connect namespace of the cluster."
  value       = aws_service_discovery_http_namespace.this.arn
}

output "name" {
  description = "Name of the ECS cluster."
  value       = aws_ecs_cluster.this.name
}
