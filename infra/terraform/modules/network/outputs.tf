output "vpc_id" {
  description = "ID of the VPC."
  value       = aws_vpc.this.id
}

output "vpc_cidr_block" {
  description = "CIDR block of the VPC."
  value       = aws_vpc.this.cidr_block
}

output "public_subnet_ids" {
  description = "Public subnets (load balancers and NAT gateways only), one per zone."
  value       = aws_subnet.public[*].id
}

output "private_subnet_ids" {
  description = "Private subnets for the ECS tasks and EMR Serverless, one per zone."
  value       = aws_subnet.private[*].id
}

output "data_subnet_ids" {
  description = "Data subnets (database, cache) with no route to the internet, one per zone."
  value       = aws_subnet.data[*].id
}

output "nat_public_ips" {
  description = "Public addresses the tasks' outbound traffic (webhooks) leaves from."
  value       = aws_eip.nat[*].public_ip
}

output "flow_log_group_name" {
  description = "CloudWatch log group of the VPC flow logs."
  value       = aws_cloudwatch_log_group.flow_logs.name
}
