# The platform in a development account: the module's small default sizes, one NAT gateway,
# no deletion protection.
# Sizes are set here; what differs per deploy (image, host names, certificates) comes from
# terraform.tfvars. The composition itself is modules/platform, shared with the other environment.

provider "aws" {
  region = var.region

  default_tags {
    tags = merge(var.tags, {
      Project     = "mqtt-platform"
      Environment = "dev"
      ManagedBy   = "terraform"
    })
  }
}

module "platform" {
  source = "../../modules/platform"

  environment            = "dev"
  region                 = var.region
  image                  = var.image
  portal_host            = var.portal_host
  portal_certificate_arn = var.portal_certificate_arn
  mqtt_host              = var.mqtt_host
  mqtt_certificate_arn   = var.mqtt_certificate_arn
  alarm_emails           = var.alarm_emails

  vpc_cidr            = "10.50.0.0/16"
  single_nat_gateway  = true
  deletion_protection = false
  db_instance_class   = "db.t4g.medium"
  cache_node_type     = "cache.t4g.small"
  broker_min_count    = 1
  broker_max_count    = 2

  spark_runner       = var.spark_runner
  spark_code_version = var.spark_code_version
  spark_image_uri    = var.spark_image_uri
}
