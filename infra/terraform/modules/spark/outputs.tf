output "application_id" {
  description = "ID of the EMR Serverless application (aws emr-serverless start-job-run --application-id)."
  value       = aws_emrserverless_application.this.id
}

output "application_arn" {
  description = "ARN of the EMR Serverless application (the worker may submit to it)."
  value       = aws_emrserverless_application.this.arn
}

output "job_role_arn" {
  description = "Job role to pass with every job run (--execution-role-arn)."
  value       = aws_iam_role.job.arn
}

output "security_group_id" {
  description = "Security group of the Spark workers (the database allows it)."
  value       = aws_security_group.this.id
}
