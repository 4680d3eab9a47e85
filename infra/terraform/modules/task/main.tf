# One ECS Fargate task definition running one role of the table of processes
# (common/runtime/processes.py). The container's command is only the ROLE: the image's entrypoint
# turns it into the command line, so the table stays the single place command lines live.

locals {
  environment = [for name, value in var.environment : { name = name, value = value }]
  secrets     = [for name, arn in var.secrets : { name = name, valueFrom = arn }]
  port_mappings = [for name, port in var.container_ports : {
    name          = name
    containerPort = port
    hostPort      = port
    protocol      = "tcp"
  }]
}

resource "aws_ecs_task_definition" "this" {
  family                   = "${var.name}-${var.role}"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory
  execution_role_arn       = var.execution_role_arn
  task_role_arn            = var.task_role_arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  # The root filesystem is read-only; /tmp (beat's state, Spark's scratch) and /app/.data (the
  # rules job's streaming checkpoint) are task storage.
  volume {
    name = "tmp"
  }

  volume {
    name = "data"
  }

  container_definitions = jsonencode([
    {
      name                   = var.role
      image                  = var.image
      command                = [var.role]
      essential              = true
      readonlyRootFilesystem = true
      privileged             = false
      user                   = "10001:10001"
      environment            = concat(local.environment, [{ name = "PLATFORM_ROLE", value = var.role }])
      secrets                = local.secrets
      portMappings           = local.port_mappings
      mountPoints = [
        { sourceVolume = "tmp", containerPath = "/tmp", readOnly = false },
        { sourceVolume = "data", containerPath = "/app/.data", readOnly = false },
      ]
      linuxParameters = { initProcessEnabled = true, capabilities = { drop = ["ALL"] } }
      stopTimeout     = var.stop_timeout
      healthCheck = var.health_check ? {
        command     = ["CMD", "python", "-m", "common.runtime.processes", "--health", var.role]
        interval    = 30
        timeout     = 10
        retries     = 3
        startPeriod = var.health_check_start_period
      } : null
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = var.log_group_name
          awslogs-region        = var.region
          awslogs-stream-prefix = var.role
        }
      }
    }
  ])

  tags = var.tags
}
