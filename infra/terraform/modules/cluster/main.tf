# The ECS cluster every platform service runs in (Fargate), with Container Insights (the
# broker's connections-per-task scaling reads RunningTaskCount from it).

# Service Connect: services find each other by name (the portal reaches broker:1883).
resource "aws_service_discovery_http_namespace" "this" {
  name        = var.name
  description = "${var.name}: Service Connect names of the platform's services"
  tags        = var.tags
}

resource "aws_ecs_cluster" "this" {
  name = var.name

  service_connect_defaults {
    namespace = aws_service_discovery_http_namespace.this.arn
  }

  setting {
    name  = "containerInsights"
    value = "enabled"
  }

  configuration {
    execute_command_configuration {
      kms_key_id = var.kms_key_arn
      logging    = "OVERRIDE"
      log_configuration {
        cloud_watch_encryption_enabled = true
        cloud_watch_log_group_name     = var.exec_log_group_name
      }
    }
  }

  tags = var.tags
}

resource "aws_ecs_cluster_capacity_providers" "this" {
  cluster_name       = aws_ecs_cluster.this.name
  capacity_providers = ["FARGATE", "FARGATE_SPOT"]

  default_capacity_provider_strategy {
    capacity_provider = "FARGATE"
    weight            = 1
    base              = 1
  }
}
