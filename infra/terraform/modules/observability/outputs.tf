output "kms_key_arn" {
  description = "KMS key of the log groups and the alarm topic (also for VPC flow logs and WAF logs)."
  value       = module.kms.arn
}

output "log_group_names" {
  description = "Log group of each role of the table of processes, by role."
  value       = { for role, group in aws_cloudwatch_log_group.role : role => group.name }
}

output "log_group_arns" {
  description = "ARN of each role's log group, by role."
  value       = { for role, group in aws_cloudwatch_log_group.role : role => group.arn }
}

output "alarm_topic_arn" {
  description = "SNS topic every alarm notifies."
  value       = aws_sns_topic.alarms.arn
}

output "service_log_group_names" {
  description = "Log groups of ECS Exec (ecs-exec), Redis's slow log (redis-slow-log) and EMR Serverless (emr-serverless)."
  value       = { for key, group in aws_cloudwatch_log_group.service : key => group.name }
}

output "service_log_group_arns" {
  description = "ARNs of the ecs-exec, redis-slow-log and emr-serverless log groups, by key."
  value       = { for key, group in aws_cloudwatch_log_group.service : key => group.arn }
}

output "waf_log_group_arn" {
  description = "Log group of the portal's WAF."
  value       = aws_cloudwatch_log_group.waf.arn
}
