output "alb_dns_name" {
  description = "DNS name of the ALB: point the portal's host name at it."
  value       = aws_lb.this.dns_name
}

output "alb_zone_id" {
  description = "Hosted zone of the ALB (for a Route 53 alias)."
  value       = aws_lb.this.zone_id
}

output "alb_arn_suffix" {
  description = "ARN suffix of the ALB (CloudWatch dimensions)."
  value       = aws_lb.this.arn_suffix
}

output "security_group_id" {
  description = "Security group of the web tasks (database, cache and brokers allow it)."
  value       = aws_security_group.tasks.id
}

output "web_acl_arn" {
  description = "ARN of the WAF web ACL."
  value       = aws_wafv2_web_acl.this.arn
}

output "task_definition_arn" {
  description = "Task definition of the web role."
  value       = module.task.arn
}
