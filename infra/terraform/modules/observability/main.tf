# Logs and alarms of one environment: a KMS key for logs and alarm notifications, one log
# group per role of the table of processes (plus WAF and EMR), an SNS topic, and the alarms
# operators are paged on.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  account = data.aws_caller_identity.current.account_id
  roles   = ["web", "broker", "worker", "beat", "rules", "billing", "migrate"]
}

data "aws_iam_policy_document" "kms_services" {
  # checkov:skip=CKV_AWS_111:A key policy's "*" resource is the key itself: these statements let CloudWatch use this key only.
  # checkov:skip=CKV_AWS_356:As above: in a key policy the resource is this key only.
  statement {
    sid       = "CloudWatchLogsEncrypt"
    actions   = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["logs.${var.region}.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "kms:EncryptionContext:aws:logs:arn"
      values   = ["arn:${data.aws_partition.current.partition}:logs:${var.region}:${local.account}:*"]
    }
  }

  statement {
    sid       = "AlarmsPublishToEncryptedTopic"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey*"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["cloudwatch.amazonaws.com"]
    }
  }
}

module "kms" {
  source = "../kms_key"

  alias            = "${var.name}-logs"
  description      = "${var.name}: CloudWatch logs and alarm notifications"
  policy_documents = [data.aws_iam_policy_document.kms_services.json]
  tags             = var.tags
}

# The key this module made itself before the kms_key module: kept, not replaced.
moved {
  from = aws_kms_key.logs
  to   = module.kms.aws_kms_key.this
}

moved {
  from = aws_kms_alias.logs
  to   = module.kms.aws_kms_alias.this
}

resource "aws_cloudwatch_log_group" "role" {
  for_each          = toset(local.roles)
  name              = "/${var.name}/${each.key}"
  retention_in_days = var.log_retention_days
  kms_key_id        = module.kms.arn
  tags              = merge(var.tags, { Role = each.key })
}

# Logs of the managed services: operator shells (ECS Exec), Redis's slow log, EMR Serverless.
resource "aws_cloudwatch_log_group" "service" {
  for_each          = toset(["ecs-exec", "redis-slow-log", "emr-serverless"])
  name              = "/${var.name}/${each.key}"
  retention_in_days = var.log_retention_days
  kms_key_id        = module.kms.arn
  tags              = var.tags
}

# WAF requires its log group's name to start with aws-waf-logs-.
resource "aws_cloudwatch_log_group" "waf" {
  name              = "aws-waf-logs-${var.name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = module.kms.arn
  tags              = var.tags
}

resource "aws_sns_topic" "alarms" {
  name              = "${var.name}-alarms"
  kms_master_key_id = module.kms.arn
  tags              = var.tags
}

resource "aws_sns_topic_subscription" "email" {
  for_each  = toset(var.alarm_emails)
  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = each.key
}

# --- broker ---------------------------------------------------------------------------------

resource "aws_cloudwatch_metric_alarm" "broker_connections" {
  alarm_name          = "${var.name}-broker-connections-high"
  alarm_description   = "MQTT connections (TLS flows on the NLB) near the fleet's planned capacity: scale brokers or raise max_count."
  namespace           = "AWS/NetworkELB"
  metric_name         = "ActiveFlowCount_TLS"
  dimensions          = { LoadBalancer = var.nlb_arn_suffix }
  statistic           = "Average"
  period              = 300
  evaluation_periods  = 2
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.broker_connections_threshold
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "broker_unhealthy" {
  for_each            = var.broker_target_group_arn_suffixes
  alarm_name          = "${var.name}-broker-${each.key}-unhealthy-targets"
  alarm_description   = "A broker task fails the NLB's health check on the ${each.key} listener."
  namespace           = "AWS/NetworkELB"
  metric_name         = "UnHealthyHostCount"
  dimensions          = { LoadBalancer = var.nlb_arn_suffix, TargetGroup = each.value }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

# --- web ------------------------------------------------------------------------------------

resource "aws_cloudwatch_metric_alarm" "web_5xx" {
  alarm_name          = "${var.name}-web-5xx"
  alarm_description   = "The portal/API answers server errors."
  namespace           = "AWS/ApplicationELB"
  metric_name         = "HTTPCode_Target_5XX_Count"
  dimensions          = { LoadBalancer = var.alb_arn_suffix }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.web_5xx_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

# Errors logged by any role (Python's logging prints the level name).
resource "aws_cloudwatch_log_metric_filter" "errors" {
  for_each       = aws_cloudwatch_log_group.role
  name           = "${var.name}-${each.key}-errors"
  log_group_name = each.value.name
  pattern        = "?ERROR ?CRITICAL ?Traceback"
  metric_transformation {
    name          = "LoggedErrors"
    namespace     = "MqttPlatform/${var.name}"
    value         = "1"
    default_value = "0"
    dimensions    = {}
  }
}

resource "aws_cloudwatch_metric_alarm" "errors" {
  for_each            = aws_cloudwatch_log_group.role
  alarm_name          = "${var.name}-${each.key}-logged-errors"
  alarm_description   = "The ${each.key} role logs errors."
  namespace           = "MqttPlatform/${var.name}"
  metric_name         = "LoggedErrors"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.logged_errors_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags

  depends_on = [aws_cloudwatch_log_metric_filter.errors]
}

# --- database -------------------------------------------------------------------------------

resource "aws_cloudwatch_metric_alarm" "db_cpu" {
  alarm_name          = "${var.name}-db-cpu-high"
  alarm_description   = "Database CPU above ${var.db_cpu_threshold}% for 15 minutes."
  namespace           = "AWS/RDS"
  metric_name         = "CPUUtilization"
  dimensions          = { DBInstanceIdentifier = var.db_instance_identifier }
  statistic           = "Average"
  period              = 300
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.db_cpu_threshold
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "db_storage" {
  alarm_name          = "${var.name}-db-free-storage-low"
  alarm_description   = "Database free storage below ${var.db_free_storage_threshold_gb} GB (autoscaling storage has a ceiling)."
  namespace           = "AWS/RDS"
  metric_name         = "FreeStorageSpace"
  dimensions          = { DBInstanceIdentifier = var.db_instance_identifier }
  statistic           = "Minimum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "LessThanThreshold"
  threshold           = var.db_free_storage_threshold_gb * 1024 * 1024 * 1024
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

# --- queue lag ------------------------------------------------------------------------------

# The credential-expiry sweep is a periodic task beat queues every minute: its completions in
# the worker's log are a canary through the Celery queue. When the queue lags (or beat or the
# workers stop), completions stop and this alarm fires.
resource "aws_cloudwatch_log_metric_filter" "queue_canary" {
  name           = "${var.name}-queue-canary"
  log_group_name = aws_cloudwatch_log_group.role["worker"].name
  pattern        = "\"tenants.tasks.expire_credentials\" \"succeeded\""
  metric_transformation {
    name      = "QueueCanaryCompleted"
    namespace = "MqttPlatform/${var.name}"
    value     = "1"
  }
}

resource "aws_cloudwatch_metric_alarm" "queue_lag" {
  alarm_name          = "${var.name}-celery-queue-lag"
  alarm_description   = "No periodic task completed through the Celery queue for ${var.queue_lag_minutes} minutes: the queue lags or workers/beat are down."
  namespace           = "MqttPlatform/${var.name}"
  metric_name         = "QueueCanaryCompleted"
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = var.queue_lag_minutes
  comparison_operator = "LessThanThreshold"
  threshold           = 1
  treat_missing_data  = "breaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags

  depends_on = [aws_cloudwatch_log_metric_filter.queue_canary]
}
