# The platform in production: three zones with a NAT gateway each, Multi-AZ database, a
# three-node cache, three brokers at least, deletion protection on.
# Sizes are set here; what differs per deploy (image, host names, certificates) comes from
# terraform.tfvars. The composition itself is modules/platform, shared with the other environment.

provider "aws" {
  region = var.region

  default_tags {
    tags = merge(var.tags, {
      Project     = "mqtt-platform"
      Environment = "prod"
      ManagedBy   = "terraform"
    })
  }
}

module "platform" {
  source = "../../modules/platform"

  environment            = "prod"
  region                 = var.region
  image                  = var.image
  portal_host            = var.portal_host
  portal_certificate_arn = var.portal_certificate_arn
  mqtt_host              = var.mqtt_host
  mqtt_certificate_arn   = var.mqtt_certificate_arn
  alarm_emails           = var.alarm_emails

  vpc_cidr                    = "10.40.0.0/16"
  single_nat_gateway          = false
  deletion_protection         = true
  secret_recovery_window_days = 30
  archive_glacier_after_days  = 180
  db_instance_class           = "db.r6g.large"
  db_allocated_storage_gb     = 200
  db_backup_retention_days    = 30
  cache_node_type             = "cache.r7g.large"
  cache_nodes                 = 3
  web_cpu                     = 1024
  web_memory                  = 2048
  web_min_count               = 3
  web_max_count               = 12
  broker_memory               = 4096
  broker_min_count            = 3
  broker_max_count            = 30
  broker_connections_alarm    = 400000
  worker_cpu                  = 1024
  worker_memory               = 4096
  worker_min_count            = 2
  worker_max_count            = 8
  rules_cpu                   = 4096
  rules_memory                = 16384
  spark_max_vcpu              = "128 vCPU"
  spark_max_memory            = "512 GB"

  spark_runner       = var.spark_runner
  spark_code_version = var.spark_code_version
  spark_image_uri    = var.spark_image_uri
}
