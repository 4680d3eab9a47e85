# The background roles as ECS Fargate services without load balancers: the Celery worker
# (scaled on CPU), Celery beat (exactly one: deployments stop the old task before starting the
# new one) and the live rules job (Spark in local mode inside the task; one per deployment).

locals {
  services = {
    worker = { cpu = var.worker_cpu, memory = var.worker_memory, count = var.worker_min_count, singleton = false }
    beat   = { cpu = 256, memory = 512, count = 1, singleton = true }
    rules  = { cpu = var.rules_cpu, memory = var.rules_memory, count = var.rules_enabled ? 1 : 0, singleton = true }
  }
}

module "task" {
  source   = "../task"
  for_each = local.services

  name               = var.name
  role               = each.key
  image              = var.image
  cpu                = each.value.cpu
  memory             = each.value.memory
  execution_role_arn = var.execution_role_arn
  task_role_arn      = var.task_role_arns[each.key]
  environment = merge(var.environment, each.key == "rules" ? {
    SPARK_MASTER       = "local[*]"
    RULES_METRICS_PORT = "9101"
    RULES_CHECKPOINT   = "/app/.data/rules-checkpoint"
  } : {})
  secrets                   = var.secrets
  health_check_start_period = each.key == "rules" ? 180 : 60
  log_group_name            = var.log_group_names[each.key]
  region                    = var.region
  tags                      = var.tags
}

resource "aws_security_group" "this" {
  name_prefix = "${var.name}-workers-"
  description = "${var.name}: worker, beat and rules tasks (no inbound traffic)"
  vpc_id      = var.vpc_id
  tags        = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_egress_rule" "this" {
  security_group_id = aws_security_group.this.id
  description       = "Postgres, Redis, brokers, S3, webhooks, EMR Serverless (through NAT and endpoints)"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 0
  to_port           = 65535
}

resource "aws_ecs_service" "this" {
  for_each         = local.services
  name             = each.key
  cluster          = var.cluster_arn
  task_definition  = module.task[each.key].arn
  desired_count    = each.value.count
  launch_type      = "FARGATE"
  platform_version = "LATEST"
  # Singletons never run twice: the old task stops before the new one starts.
  deployment_minimum_healthy_percent = each.value.singleton ? 0 : 100
  deployment_maximum_percent         = each.value.singleton ? 100 : 200
  enable_ecs_managed_tags            = true
  propagate_tags                     = "SERVICE"

  network_configuration {
    subnets          = var.private_subnet_ids
    security_groups  = [aws_security_group.this.id]
    assign_public_ip = false
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  lifecycle {
    ignore_changes = [desired_count]
  }

  tags = var.tags
}

resource "aws_appautoscaling_target" "worker" {
  service_namespace  = "ecs"
  scalable_dimension = "ecs:service:DesiredCount"
  resource_id        = "service/${var.cluster_name}/${aws_ecs_service.this["worker"].name}"
  min_capacity       = var.worker_min_count
  max_capacity       = var.worker_max_count
}

resource "aws_appautoscaling_policy" "worker_cpu" {
  name               = "${var.name}-worker-cpu"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.worker.service_namespace
  scalable_dimension = aws_appautoscaling_target.worker.scalable_dimension
  resource_id        = aws_appautoscaling_target.worker.resource_id

  target_tracking_scaling_policy_configuration {
    target_value = 70
    predefined_metric_specification {
      predefined_metric_type = "ECSServiceAverageCPUUtilization"
    }
  }
}
