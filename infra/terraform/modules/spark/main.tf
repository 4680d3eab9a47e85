# EMR Serverless for the Spark jobs that outgrow a task: an application in the private subnets
# (auto-start, auto-stop, capped capacity) and a job role that may read the archive and usage log
# prefixes and write only the jobs' outputs. The platform's workers submit the jobs.

data "aws_caller_identity" "current" {}

locals {
  account = data.aws_caller_identity.current.account_id
  # The data bucket's name (arn:PARTITION:s3:::NAME): the code package lives under code_prefix.
  data_bucket = element(split(":::", var.data_bucket_arn), 1)
}

resource "aws_security_group" "this" {
  # checkov:skip=CKV2_AWS_5:Attached to the EMR Serverless application's network_configuration below, a link the scanner does not follow.
  name_prefix = "${var.name}-spark-"
  description = "${var.name}: EMR Serverless workers (no inbound traffic)"
  vpc_id      = var.vpc_id
  tags        = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_egress_rule" "this" {
  security_group_id = aws_security_group.this.id
  description       = "Postgres (results), S3 (archive, usage), Redis"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 0
  to_port           = 65535
}

resource "aws_emrserverless_application" "this" {
  name          = "${var.name}-spark"
  release_label = var.release_label
  type          = "spark"
  architecture  = var.architecture

  dynamic "image_configuration" {
    for_each = var.image_uri == null ? [] : [var.image_uri]
    content {
      image_uri = image_configuration.value
    }
  }

  maximum_capacity {
    cpu    = var.max_vcpu
    memory = var.max_memory
  }

  auto_start_configuration {
    enabled = true
  }

  auto_stop_configuration {
    enabled              = true
    idle_timeout_minutes = 15
  }

  network_configuration {
    subnet_ids         = var.private_subnet_ids
    security_group_ids = [aws_security_group.this.id]
  }

  tags = var.tags
}

# --- the job role ---------------------------------------------------------------------------

data "aws_iam_policy_document" "job_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["emr-serverless.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }
}

resource "aws_iam_role" "job" {
  name_prefix        = "${substr(var.name, 0, 24)}-spark-job-"
  description        = "${var.name}: what the rules and billing Spark jobs may touch"
  assume_role_policy = data.aws_iam_policy_document.job_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "job" {
  statement {
    sid       = "ListInputs"
    actions   = ["s3:ListBucket"]
    resources = [var.data_bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [for prefix in concat(var.read_prefixes, var.write_prefixes, [var.code_prefix]) : "${prefix}*"]
    }
  }

  statement {
    sid       = "ReadArchiveUsageAndCode"
    actions   = ["s3:GetObject"]
    resources = [for prefix in concat(var.read_prefixes, var.write_prefixes, [var.code_prefix]) : "${var.data_bucket_arn}/${prefix}*"]
  }

  statement {
    sid       = "WriteJobOutputs"
    actions   = ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    resources = [for prefix in var.write_prefixes : "${var.data_bucket_arn}/${prefix}*"]
  }

  statement {
    sid       = "UseDataKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.data_kms_key_arn]
  }

  statement {
    sid       = "ReadDatabaseSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.database_secret_arn]
  }

  statement {
    sid       = "DecryptDatabaseSecret"
    actions   = ["kms:Decrypt"]
    resources = [var.database_secret_kms_key_arn]
  }

  statement {
    sid       = "WriteJobLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = ["${var.log_group_arn}:*"]
  }
}

resource "aws_iam_role_policy" "job" {
  name   = "rules-and-billing"
  role   = aws_iam_role.job.id
  policy = data.aws_iam_policy_document.job.json
}

# No schedule here submits billing: Celery beat's monthly `billing-draft` does, through the
# platform's runner (spark/cluster/emr_serverless.py, `spark_runner = "emr-serverless"`), which
# first writes the accounts the job needs (`--accounts`: price books, issued months and credits
# from the platform's database) and stores the invoices the job returns. A job submitted from
# here could do neither (tests/deploy/test_spark_cluster.py).
