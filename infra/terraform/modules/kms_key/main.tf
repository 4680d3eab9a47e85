# One customer-managed KMS key with its alias: rotated yearly, 30 days to cancel a deletion, and a
# key policy whose account-root statement lets IAM policies grant its use. Services that must use
# the key themselves (CloudWatch Logs, alarms) add statements through `policy_documents`.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

data "aws_iam_policy_document" "this" {
  # checkov:skip=CKV_AWS_109:A key policy's "*" resource is the key itself; the account root statement is what lets IAM policies grant use of the key at all.
  # checkov:skip=CKV_AWS_111:As above: in a key policy the resource is this key only.
  # checkov:skip=CKV_AWS_356:As above: in a key policy the resource is this key only.
  source_policy_documents = var.policy_documents

  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
}

resource "aws_kms_key" "this" {
  description             = var.description
  enable_key_rotation     = true
  deletion_window_in_days = var.deletion_window_in_days
  policy                  = data.aws_iam_policy_document.this.json
  tags                    = var.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.alias}"
  target_key_id = aws_kms_key.this.key_id
}
