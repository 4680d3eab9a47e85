output "execution_role_arn" {
  description = "Role ECS starts every task with (image pull, logs, secrets)."
  value       = aws_iam_role.execution.arn
}

output "task_role_arns" {
  description = "Task role of each role of the table of processes, by role."
  value       = { for role, r in aws_iam_role.task : role => r.arn }
}
