output "portal_dns_name" {
  description = "Point the portal's host name (var.portal_host) at this ALB."
  value       = module.web.alb_dns_name
}

output "mqtt_dns_name" {
  description = "Point the MQTT host name (var.mqtt_host) at this NLB (8883 MQTT/TLS, 443 WSS)."
  value       = module.broker.nlb_dns_name
}

output "cluster_name" {
  description = "ECS cluster of the services and one-off tasks."
  value       = module.cluster.name
}

output "private_subnet_ids" {
  description = "Subnets for one-off tasks (aws ecs run-task --network-configuration)."
  value       = module.network.private_subnet_ids
}

output "task_security_group_id" {
  description = "Security group for one-off tasks (migrate, billing)."
  value       = module.workers.security_group_id
}

output "migrate_task_definition" {
  description = "Task definition of the migrate role: run it before every upgrade."
  value       = module.migrate_task.arn
}

output "billing_task_definition" {
  description = "Task definition of the billing role (run by hand: --overrides to set BILLING_PERIOD)."
  value       = module.billing_task.arn
}

output "data_bucket" {
  description = "The data bucket (archive, usage log, payloads)."
  value       = module.storage.data_bucket
}

output "database_address" {
  description = "Host name of the database."
  value       = module.database.address
}

output "spark_application_id" {
  description = "EMR Serverless application for large Spark runs."
  value       = module.spark.application_id
}

output "spark_job_role_arn" {
  description = "Job role to pass to EMR Serverless job runs."
  value       = module.spark.job_role_arn
}

output "alarm_topic_arn" {
  description = "SNS topic of every alarm."
  value       = module.observability.alarm_topic_arn
}

output "spark_log_group_name" {
  description = "Log group of the EMR Serverless job runs."
  value       = module.spark.log_group_name
}

output "spark_code_bucket" {
  description = "Bucket of the Spark jobs' code package (python -m spark.package upload --bucket)."
  value       = module.spark.code_bucket
}

output "spark_code_prefix" {
  description = "Prefix of the code package (python -m spark.package upload --prefix)."
  value       = module.spark.code_prefix
}

output "spark_code_uri" {
  description = "s3:// folder of the uploaded code package versions."
  value       = module.spark.code_uri
}
