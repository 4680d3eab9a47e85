# ElastiCache for Redis: the Celery broker and results, the Channels layer and (with the cluster
# work) the brokers' bus. A replication group with a replica in another zone and automatic
# failover, TLS in transit with an AUTH token, encrypted at rest with its own KMS key.

module "kms" {
  source = "../kms_key"

  alias       = "${var.name}-cache"
  description = "${var.name}: cache at rest"
  tags        = var.tags
}

# The key this module made itself before the kms_key module: kept, not replaced.
moved {
  from = aws_kms_key.this
  to   = module.kms.aws_kms_key.this
}

moved {
  from = aws_kms_alias.this
  to   = module.kms.aws_kms_alias.this
}

resource "aws_elasticache_subnet_group" "this" {
  name        = "${var.name}-cache"
  description = "${var.name}: data subnets"
  subnet_ids  = var.subnet_ids
  tags        = var.tags
}

resource "aws_security_group" "this" {
  name_prefix = "${var.name}-cache-"
  description = "${var.name}: Redis, reachable from the platform's tasks only"
  vpc_id      = var.vpc_id
  tags        = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "clients" {
  for_each                     = toset(var.allowed_security_group_ids)
  security_group_id            = aws_security_group.this.id
  description                  = "Redis (TLS) from a platform task"
  referenced_security_group_id = each.key
  ip_protocol                  = "tcp"
  from_port                    = 6379
  to_port                      = 6379
}

resource "aws_elasticache_replication_group" "this" {
  replication_group_id = var.name
  description          = "${var.name}: Celery, Channels, broker bus"
  engine               = "redis"
  engine_version       = var.engine_version
  node_type            = var.node_type
  port                 = 6379
  parameter_group_name = "default.redis7"

  num_cache_clusters         = var.num_cache_clusters
  automatic_failover_enabled = true
  multi_az_enabled           = true

  subnet_group_name  = aws_elasticache_subnet_group.this.name
  security_group_ids = [aws_security_group.this.id]

  at_rest_encryption_enabled = true
  kms_key_id                 = module.kms.arn
  transit_encryption_enabled = true
  auth_token                 = var.auth_token
  auth_token_update_strategy = "ROTATE"

  snapshot_retention_limit   = var.snapshot_retention_days
  snapshot_window            = "01:00-02:00"
  maintenance_window         = "sun:04:30-sun:05:30"
  auto_minor_version_upgrade = true
  apply_immediately          = false

  log_delivery_configuration {
    destination      = var.slow_log_group_name
    destination_type = "cloudwatch-logs"
    log_format       = "json"
    log_type         = "slow-log"
  }

  tags = var.tags
}
