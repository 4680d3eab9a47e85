output "address" {
  description = "Host name of the database."
  value       = aws_db_instance.this.address
}

output "port" {
  description = "Port of the database."
  value       = aws_db_instance.this.port
}

output "database_name" {
  description = "Name of the platform's database."
  value       = aws_db_instance.this.db_name
}

output "username" {
  description = "Master user name."
  value       = aws_db_instance.this.username
}

output "database_url" {
  description = "DATABASE_URL without the password (tasks get PGPASSWORD from master_secret_arn); TLS required."
  value       = "postgres://${aws_db_instance.this.username}@${aws_db_instance.this.address}:${aws_db_instance.this.port}/${aws_db_instance.this.db_name}?sslmode=require"
}

output "master_secret_arn" {
  description = "Secret RDS manages with the master credentials (JSON: username, password)."
  value       = aws_db_instance.this.master_user_secret[0].secret_arn
}

output "instance_identifier" {
  description = "DB instance identifier (alarms)."
  value       = aws_db_instance.this.identifier
}

output "security_group_id" {
  description = "Security group of the database."
  value       = aws_security_group.this.id
}

output "kms_key_arn" {
  description = "KMS key of the storage, snapshots and master secret."
  value       = module.kms.arn
}
