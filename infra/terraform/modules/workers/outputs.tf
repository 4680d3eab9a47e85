output "security_group_id" {
  description = "Security group of the worker, beat and rules tasks (database and cache allow it)."
  value       = aws_security_group.this.id
}

output "service_names" {
  description = "ECS services by role (worker, beat, rules)."
  value       = { for role, service in aws_ecs_service.this : role => service.name }
}

output "task_definition_arns" {
  description = "Task definitions by role."
  value       = { for role, task in module.task : role => task.arn }
}
