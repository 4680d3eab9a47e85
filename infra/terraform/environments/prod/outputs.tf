output "portal_dns_name" {
  description = "Point the portal's host name (var.portal_host) at this ALB."
  value       = module.platform.portal_dns_name
}

output "mqtt_dns_name" {
  description = "Point the MQTT host name (var.mqtt_host) at this NLB (8883 MQTT/TLS, 443 WSS)."
  value       = module.platform.mqtt_dns_name
}

output "cluster_name" {
  description = "ECS cluster of the services and one-off tasks."
  value       = module.platform.cluster_name
}

output "private_subnet_ids" {
  description = "Subnets for one-off tasks (aws ecs run-task --network-configuration)."
  value       = module.platform.private_subnet_ids
}

output "task_security_group_id" {
  description = "Security group for one-off tasks (migrate, billing)."
  value       = module.platform.task_security_group_id
}

output "migrate_task_definition" {
  description = "Task definition of the migrate role: run it before every upgrade."
  value       = module.platform.migrate_task_definition
}

output "billing_task_definition" {
  description = "Task definition of the billing role (run by hand: --overrides to set BILLING_PERIOD)."
  value       = module.platform.billing_task_definition
}

output "data_bucket" {
  description = "The data bucket (archive, usage log, payloads)."
  value       = module.platform.data_bucket
}

output "database_address" {
  description = "Host name of the database."
  value       = module.platform.database_address
}

output "spark_application_id" {
  description = "EMR Serverless application for large Spark runs."
  value       = module.platform.spark_application_id
}

output "spark_job_role_arn" {
  description = "Job role to pass to EMR Serverless job runs."
  value       = module.platform.spark_job_role_arn
}

output "alarm_topic_arn" {
  description = "SNS topic of every alarm."
  value       = module.platform.alarm_topic_arn
}

output "spark_log_group_name" {
  description = "Log group of the EMR Serverless job runs."
  value       = module.platform.spark_log_group_name
}

output "spark_code_bucket" {
  description = "Bucket of the Spark jobs' code package (python -m spark.package upload --bucket)."
  value       = module.platform.spark_code_bucket
}

output "spark_code_prefix" {
  description = "Prefix of the code package (python -m spark.package upload --prefix)."
  value       = module.platform.spark_code_prefix
}

output "spark_code_uri" {
  description = "s3:// folder of the uploaded code package versions."
  value       = module.platform.spark_code_uri
}
