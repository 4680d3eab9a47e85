terraform {
  required_version = ">= 1.5.7"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.80"
    }
  }

  # State in S3 (encrypted, versioned) with a DynamoDB lock; the values are given at
  # `terraform init -backend-config=backend.hcl` (infra/README.md, first deploy).
  backend "s3" {
    key     = "mqtt-platform/terraform.tfstate"
    encrypt = true
  }
}
