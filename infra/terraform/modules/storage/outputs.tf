output "data_bucket" {
  description = "Name of the data bucket."
  value       = aws_s3_bucket.data.id
}

output "data_bucket_arn" {
  description = "ARN of the data bucket (IAM policies scope to its prefixes)."
  value       = aws_s3_bucket.data.arn
}

output "object_store_url" {
  description = "OBJECT_STORE_URL of every process."
  value       = "s3://${aws_s3_bucket.data.id}/"
}

output "kms_key_arn" {
  description = "KMS key of the data bucket (readers and writers need it)."
  value       = module.kms.arn
}

output "logs_bucket" {
  description = "Name of the access-log bucket (load balancers write under lb/)."
  value       = aws_s3_bucket.logs.id
}
