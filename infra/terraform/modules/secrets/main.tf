# The platform's secrets in Secrets Manager, encrypted with their own KMS key:
#   django-secret-key → SECRET_KEY, service-key → MQTT_SERVICE_KEY, sealing-key → SEALING_KEY,
#   redis-auth-token (the cache's AUTH token) and redis-url → REDIS_URL (rediss://, with it).
# The database password is not here: RDS manages it in its own secret (database module), so
# it never passes through Terraform. Values are generated once by Secrets Manager; Terraform
# ignores later changes, so rotating one (infra/README.md) is never undone by an apply.

module "kms" {
  source = "../kms_key"

  alias       = "${var.name}-secrets"
  description = "${var.name}: Secrets Manager secrets"
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

locals {
  generated = {
    "django-secret-key" = "Django SECRET_KEY of the portal/API (signs sessions and CSRF tokens)"
    "service-key"       = "MQTT_SERVICE_KEY shared by the portal and every broker (signs the portal's broker tokens)"
    "sealing-key"       = "SEALING_KEY of the portal and the rule jobs (seals rules' webhook secrets in the database)"
    "redis-auth-token"  = "AUTH token of the ElastiCache replication group"
  }
}

# A fresh random value at each plan; only the first is stored (ignore_changes below).
data "aws_secretsmanager_random_password" "this" {
  for_each            = local.generated
  password_length     = 64
  exclude_punctuation = true
}

resource "aws_secretsmanager_secret" "generated" {
  # checkov:skip=CKV2_AWS_57:Rotation is an operator procedure (infra/README.md): these values are shared by running processes that read them at start, so a Lambda rotating them alone would break live sessions and connections.
  for_each                = local.generated
  name_prefix             = "${var.name}/${each.key}-"
  description             = each.value
  kms_key_id              = module.kms.arn
  recovery_window_in_days = var.recovery_window_in_days
  tags                    = var.tags
}

resource "aws_secretsmanager_secret_version" "generated" {
  for_each      = local.generated
  secret_id     = aws_secretsmanager_secret.generated[each.key].id
  secret_string = data.aws_secretsmanager_random_password.this[each.key].random_password

  lifecycle {
    ignore_changes = [secret_string]
  }
}

resource "aws_secretsmanager_secret" "redis_url" {
  # checkov:skip=CKV2_AWS_57:Derived from redis-auth-token and rotated with it (infra/README.md).
  name_prefix             = "${var.name}/redis-url-"
  description             = "REDIS_URL of every process: rediss:// with the AUTH token"
  kms_key_id              = module.kms.arn
  recovery_window_in_days = var.recovery_window_in_days
  tags                    = var.tags
}

resource "aws_secretsmanager_secret_version" "redis_url" {
  secret_id     = aws_secretsmanager_secret.redis_url.id
  secret_string = "rediss://:${aws_secretsmanager_secret_version.generated["redis-auth-token"].secret_string}@${var.redis_endpoint}:${var.redis_port}/0?ssl_cert_reqs=required"

  lifecycle {
    ignore_changes = [secret_string]
  }
}
