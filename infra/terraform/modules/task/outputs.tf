output "arn" {
  description = "ARN of the task definition (with its revision)."
  value       = aws_ecs_task_definition.this.arn
}

output "family" {
  description = "Family of the task definition (NAME-ROLE)."
  value       = aws_ecs_task_definition.this.family
}

output "role" {
  description = "The role of the table of processes the task runs."
  value       = var.role
}
