# One IAM role per role of the table of processes (the ECS task role the process runs as), each
# allowed only its own S3 prefixes, plus the execution role ECS uses to start tasks (pull the
# image, write logs, read exactly the secrets each task needs).

data "aws_partition" "current" {}

locals {
  partition = data.aws_partition.current.partition
  roles     = ["web", "broker", "worker", "beat", "rules", "billing", "migrate"]
}

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [var.account_id]
    }
  }
}

# --- execution role -------------------------------------------------------------------------

resource "aws_iam_role" "execution" {
  name_prefix        = "${substr(var.name, 0, 24)}-exec-"
  description        = "${var.name}: ECS starts the platform's tasks with it"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = var.tags
}

# Pull from ECR and write to CloudWatch Logs (AWS's managed policy for exactly this).
resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

data "aws_iam_policy_document" "execution_secrets" {
  statement {
    sid       = "ReadTaskSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = var.secret_arns
  }

  statement {
    sid       = "DecryptTaskSecrets"
    actions   = ["kms:Decrypt"]
    resources = var.secret_kms_key_arns
  }
}

resource "aws_iam_role_policy" "execution_secrets" {
  name   = "read-task-secrets"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution_secrets.json
}

# --- a task role per process ----------------------------------------------------------------

resource "aws_iam_role" "task" {
  for_each           = toset(local.roles)
  name_prefix        = "${substr(var.name, 0, 24)}-${each.key}-"
  description        = "${var.name}: the ${each.key} process"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = merge(var.tags, { Role = each.key })
}

locals {
  access = { for role in local.roles : role => lookup(var.s3_access, role, { read = [], write = [], delete = [] }) }
  # Roles with any S3 access get a policy; the others (beat, migrate) have none at all.
  with_s3 = { for role, a in local.access : role => a if length(concat(a.read, a.write, a.delete)) > 0 }
}

data "aws_iam_policy_document" "task" {
  for_each = local.with_s3

  dynamic "statement" {
    for_each = length(each.value.read) > 0 ? [1] : []
    content {
      sid       = "ListOwnPrefixes"
      actions   = ["s3:ListBucket"]
      resources = [var.data_bucket_arn]
      condition {
        test     = "StringLike"
        variable = "s3:prefix"
        values   = [for prefix in each.value.read : "${prefix}*"]
      }
    }
  }

  dynamic "statement" {
    for_each = length(each.value.read) > 0 ? [1] : []
    content {
      sid       = "ReadOwnPrefixes"
      actions   = ["s3:GetObject"]
      resources = [for prefix in each.value.read : "${var.data_bucket_arn}/${prefix}*"]
    }
  }

  dynamic "statement" {
    for_each = length(each.value.write) > 0 ? [1] : []
    content {
      sid       = "WriteOwnPrefixes"
      actions   = ["s3:PutObject", "s3:AbortMultipartUpload"]
      resources = [for prefix in each.value.write : "${var.data_bucket_arn}/${prefix}*"]
    }
  }

  dynamic "statement" {
    for_each = length(each.value.delete) > 0 ? [1] : []
    content {
      sid       = "DeleteOwnPrefixes"
      actions   = ["s3:DeleteObject"]
      resources = [for prefix in each.value.delete : "${var.data_bucket_arn}/${prefix}*"]
    }
  }

  statement {
    sid       = "UseDataKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.data_kms_key_arn]
  }
}

resource "aws_iam_role_policy" "task" {
  for_each = local.with_s3
  name     = "object-store"
  role     = aws_iam_role.task[each.key].id
  policy   = data.aws_iam_policy_document.task[each.key].json
}

# The worker hands large Spark runs (billing, backfills) to EMR Serverless.
data "aws_iam_policy_document" "worker_emr" {
  count = var.emr_application_arn == null ? 0 : 1

  statement {
    sid       = "SubmitSparkJobs"
    actions   = ["emr-serverless:StartJobRun", "emr-serverless:GetJobRun", "emr-serverless:CancelJobRun"]
    resources = [var.emr_application_arn, "${var.emr_application_arn}/jobruns/*"]
  }

  statement {
    sid       = "PassJobRole"
    actions   = ["iam:PassRole"]
    resources = [var.emr_job_role_arn]
    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["emr-serverless.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "worker_emr" {
  count  = var.emr_application_arn == null ? 0 : 1
  name   = "submit-spark-jobs"
  role   = aws_iam_role.task["worker"].id
  policy = data.aws_iam_policy_document.worker_emr[0].json
}
