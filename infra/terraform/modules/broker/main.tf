# The MQTT brokers: an ECS Fargate service (role "broker") in private subnets behind an
# internet-facing NLB that terminates TLS with an ACM certificate: MQTT over TLS on 8883 and
# MQTT over secure WebSocket on 443, forwarded as plain TCP to 1883 and 8083 inside the VPC.
# Cross-zone, access logs, client-IP stickiness; autoscaling on connections per task and CPU.

locals {
  listeners = {
    mqtts = { port = 8883, target_port = 1883 }
    wss   = { port = 443, target_port = 8083 }
  }
}

module "task" {
  source = "../task"

  name               = var.name
  role               = "broker"
  image              = var.image
  cpu                = var.cpu
  memory             = var.memory
  execution_role_arn = var.execution_role_arn
  task_role_arn      = var.task_role_arn
  environment = merge(var.environment, {
    MQTT_PORT    = "1883"
    MQTT_WS_PORT = "8083"
    METRICS_PORT = "9100"
  })
  secrets         = var.secrets
  container_ports = { mqtt = 1883, ws = 8083, metrics = 9100 }
  # Brokers get time to tell MQTT 5 clients where to go (DISCONNECT 0x9C) before SIGKILL.
  stop_timeout   = 60
  log_group_name = var.log_group_name
  region         = var.region
  tags           = var.tags
}

# --- network load balancer ------------------------------------------------------------------

resource "aws_security_group" "nlb" {
  name_prefix = "${var.name}-mqtt-nlb-"
  description = "${var.name}: MQTT clients to the NLB"
  vpc_id      = var.vpc_id
  tags        = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "nlb" {
  for_each          = local.listeners
  security_group_id = aws_security_group.nlb.id
  description       = "MQTT clients (${each.key})"
  cidr_ipv4         = var.client_cidr
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
}

resource "aws_vpc_security_group_egress_rule" "nlb" {
  for_each                     = local.listeners
  security_group_id            = aws_security_group.nlb.id
  description                  = "to the broker tasks (${each.key})"
  referenced_security_group_id = aws_security_group.tasks.id
  ip_protocol                  = "tcp"
  from_port                    = each.value.target_port
  to_port                      = each.value.target_port
}

resource "aws_lb" "this" {
  name                             = substr("${var.name}-mqtt", 0, 32)
  load_balancer_type               = "network"
  internal                         = false
  subnets                          = var.public_subnet_ids
  security_groups                  = [aws_security_group.nlb.id]
  enable_cross_zone_load_balancing = true
  enable_deletion_protection       = var.deletion_protection

  access_logs {
    bucket  = var.access_logs_bucket
    prefix  = "lb/mqtt"
    enabled = true
  }

  tags = var.tags
}

resource "aws_lb_target_group" "this" {
  for_each    = local.listeners
  name        = substr("${var.name}-${each.key}", 0, 32)
  port        = each.value.target_port
  protocol    = "TCP"
  target_type = "ip"
  vpc_id      = var.vpc_id
  # MQTT connections are long-lived: on scale-in a broker's clients get time to leave.
  deregistration_delay   = 60
  connection_termination = true
  preserve_client_ip     = "false"

  # A client comes back to the same broker while it is there (its session and subscriptions
  # live on that process until the cluster bus shares them).
  stickiness {
    enabled = true
    type    = "source_ip"
  }

  health_check {
    protocol            = "TCP"
    port                = "traffic-port"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }

  tags = var.tags
}

resource "aws_lb_listener" "this" {
  for_each          = local.listeners
  load_balancer_arn = aws_lb.this.arn
  port              = each.value.port
  protocol          = "TLS"
  certificate_arn   = var.certificate_arn
  ssl_policy        = var.ssl_policy
  alpn_policy       = each.key == "wss" ? "HTTP1Only" : "None"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.this[each.key].arn
  }

  tags = var.tags
}

# --- the service ----------------------------------------------------------------------------

resource "aws_security_group" "tasks" {
  name_prefix = "${var.name}-broker-"
  description = "${var.name}: broker tasks, reachable from the NLB only"
  vpc_id      = var.vpc_id
  tags        = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "tasks_from_nlb" {
  for_each                     = local.listeners
  security_group_id            = aws_security_group.tasks.id
  description                  = "from the NLB (${each.key})"
  referenced_security_group_id = aws_security_group.nlb.id
  ip_protocol                  = "tcp"
  from_port                    = each.value.target_port
  to_port                      = each.value.target_port
}

resource "aws_vpc_security_group_ingress_rule" "tasks_internal" {
  for_each                     = toset(var.internal_client_security_group_ids)
  security_group_id            = aws_security_group.tasks.id
  description                  = "MQTT from the portal's live views"
  referenced_security_group_id = each.key
  ip_protocol                  = "tcp"
  from_port                    = 1883
  to_port                      = 1883
}

resource "aws_vpc_security_group_egress_rule" "tasks" {
  security_group_id = aws_security_group.tasks.id
  description       = "Postgres, Redis, S3, Secrets Manager, ECR (through NAT and endpoints)"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 0
  to_port           = 65535
}

resource "aws_ecs_service" "this" {
  name                               = "broker"
  cluster                            = var.cluster_arn
  task_definition                    = module.task.arn
  desired_count                      = var.min_count
  launch_type                        = "FARGATE"
  platform_version                   = "LATEST"
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  health_check_grace_period_seconds  = 60
  enable_ecs_managed_tags            = true
  propagate_tags                     = "SERVICE"

  network_configuration {
    subnets          = var.private_subnet_ids
    security_groups  = [aws_security_group.tasks.id]
    assign_public_ip = false
  }

  dynamic "load_balancer" {
    for_each = local.listeners
    content {
      target_group_arn = aws_lb_target_group.this[load_balancer.key].arn
      container_name   = "broker"
      container_port   = load_balancer.value.target_port
    }
  }

  # Inside the VPC the brokers answer as broker:1883 (the portal's live views connect there).
  service_connect_configuration {
    enabled   = true
    namespace = var.service_connect_namespace_arn
    service {
      port_name      = "mqtt"
      discovery_name = "broker"
      client_alias {
        port     = 1883
        dns_name = "broker"
      }
    }
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  lifecycle {
    ignore_changes = [desired_count] # autoscaling owns it
  }

  tags = var.tags

  depends_on = [aws_lb_listener.this]
}

# --- autoscaling ----------------------------------------------------------------------------

resource "aws_appautoscaling_target" "this" {
  service_namespace  = "ecs"
  scalable_dimension = "ecs:service:DesiredCount"
  resource_id        = "service/${var.cluster_name}/${aws_ecs_service.this.name}"
  min_capacity       = var.min_count
  max_capacity       = var.max_count
}

resource "aws_appautoscaling_policy" "cpu" {
  name               = "${var.name}-broker-cpu"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.this.service_namespace
  scalable_dimension = aws_appautoscaling_target.this.scalable_dimension
  resource_id        = aws_appautoscaling_target.this.resource_id

  target_tracking_scaling_policy_configuration {
    target_value = var.cpu_target_percent
    predefined_metric_specification {
      predefined_metric_type = "ECSServiceAverageCPUUtilization"
    }
    scale_out_cooldown = 60
    # Scaling in closes a broker's connections (its clients reconnect elsewhere): slowly.
    scale_in_cooldown = 900
  }
}

# Connections per task: the NLB's active TLS flows over the service's running tasks.
resource "aws_appautoscaling_policy" "connections" {
  name               = "${var.name}-broker-connections"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.this.service_namespace
  scalable_dimension = aws_appautoscaling_target.this.scalable_dimension
  resource_id        = aws_appautoscaling_target.this.resource_id

  target_tracking_scaling_policy_configuration {
    target_value       = var.connections_per_task_target
    scale_out_cooldown = 60
    scale_in_cooldown  = 900

    customized_metric_specification {
      metrics {
        id          = "flows"
        return_data = false
        metric_stat {
          stat = "Average"
          metric {
            namespace   = "AWS/NetworkELB"
            metric_name = "ActiveFlowCount_TLS"
            dimensions {
              name  = "LoadBalancer"
              value = aws_lb.this.arn_suffix
            }
          }
        }
      }

      metrics {
        id          = "tasks"
        return_data = false
        metric_stat {
          stat = "Average"
          metric {
            namespace   = "ECS/ContainerInsights"
            metric_name = "RunningTaskCount"
            dimensions {
              name  = "ClusterName"
              value = var.cluster_name
            }
            dimensions {
              name  = "ServiceName"
              value = aws_ecs_service.this.name
            }
          }
        }
      }

      metrics {
        id          = "per_task"
        label       = "MQTT connections per broker task"
        expression  = "flows / IF(tasks > 0, tasks, 1)"
        return_data = true
      }
    }
  }
}
