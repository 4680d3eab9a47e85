output "nlb_dns_name" {
  description = "DNS name of the NLB: point the MQTT host name (CNAME/alias) at it."
  value       = aws_lb.this.dns_name
}

output "nlb_zone_id" {
  description = "Hosted zone of the NLB (for a Route 53 alias)."
  value       = aws_lb.this.zone_id
}

output "nlb_arn_suffix" {
  description = "ARN suffix of the NLB (CloudWatch dimensions)."
  value       = aws_lb.this.arn_suffix
}

output "target_group_arn_suffixes" {
  description = "ARN suffixes of the target groups by listener (mqtts, wss)."
  value       = { for key, tg in aws_lb_target_group.this : key => tg.arn_suffix }
}

output "security_group_id" {
  description = "Security group of the broker tasks (database and cache allow it)."
  value       = aws_security_group.tasks.id
}

output "service_name" {
  description = "Name of the ECS service."
  value       = aws_ecs_service.this.name
}

output "task_definition_arn" {
  description = "Task definition of the broker."
  value       = module.task.arn
}
