output "application_id" {
  description = "ID of the EMR Serverless application (aws emr-serverless start-job-run --application-id; the platform's SPARK_APPLICATION_ID)."
  value       = aws_emrserverless_application.this.id
}

output "application_arn" {
  description = "ARN of the EMR Serverless application (the worker may submit to it)."
  value       = aws_emrserverless_application.this.arn
}

output "job_role_arn" {
  description = "Job role to pass with every job run (--execution-role-arn; the platform's SPARK_JOB_ROLE_ARN)."
  value       = aws_iam_role.job.arn
}

output "security_group_id" {
  description = "Security group of the Spark workers (the database allows it)."
  value       = aws_security_group.this.id
}

output "log_group_name" {
  description = "CloudWatch log group of the job runs (the platform's SPARK_LOG_GROUP_NAME)."
  value       = var.log_group_name
}

output "code_bucket" {
  description = "Bucket of the jobs' code package (python -m spark.package upload --bucket)."
  value       = local.data_bucket
}

output "code_prefix" {
  description = "Prefix of the code package in that bucket (python -m spark.package upload --prefix)."
  value       = var.code_prefix
}

output "code_uri" {
  description = "s3:// folder under which each uploaded package version lives (SPARK_CODE_URI is one of its version folders)."
  value       = "s3://${local.data_bucket}/${var.code_prefix}"
}
