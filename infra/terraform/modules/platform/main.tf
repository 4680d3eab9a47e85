# The whole platform, composed from the other modules: what every environment deploys. Every
# process is the one image running one role of the table of processes (common/runtime/processes.py);
# task definitions pass only the role. An environment (environments/dev, environments/prod)
# configures the AWS provider and calls this module with its sizes.

data "aws_caller_identity" "current" {}

locals {
  name = "mqtt-${var.environment}"

  # The plain environment every process gets; secrets come from Secrets Manager below.
  environment = {
    DJANGO_DEBUG         = "0"
    DATABASE_URL         = module.database.database_url
    OBJECT_STORE_URL     = module.storage.object_store_url
    ALLOWED_HOSTS        = var.portal_host
    CSRF_TRUSTED_ORIGINS = "https://${var.portal_host}"
    MQTT_PUBLIC_HOST     = var.mqtt_host
    MQTT_PUBLIC_PORT     = "8883"
    MQTT_PUBLIC_WS_URL   = "wss://${var.mqtt_host}/mqtt"
    MQTT_INTERNAL_HOST   = "broker" # Service Connect (broker module)
    MQTT_INTERNAL_PORT   = "1883"
    LOG_LEVEL            = "INFO"
    AWS_DEFAULT_REGION   = var.region
    # Tenants' webhooks reach public addresses only: never the VPC, the cloud metadata
    # service or the tasks themselves (common/webhooks/delivery.py).
    WEBHOOK_ALLOW_PRIVATE = "0"
    # Only the ALB (inside the VPC) reaches the web tasks: X-Forwarded-For is believed from it
    # alone, and names the client (login throttles, audit, access log).
    TRUSTED_PROXIES = var.vpc_cidr
    # Where the workers run Spark jobs (spark/cluster/emr_serverless.py): the spark module's
    # outputs, under the names the platform reads.
    SPARK_RUNNER              = var.spark_runner
    SPARK_APPLICATION_ID      = module.spark.application_id
    SPARK_JOB_ROLE_ARN        = module.spark.job_role_arn
    SPARK_LOG_GROUP_NAME      = module.spark.log_group_name
    SPARK_CODE_URI            = var.spark_code_version == "" ? "" : "${module.spark.code_uri}${var.spark_code_version}/"
    SPARK_DATABASE_SECRET_ARN = module.database.master_secret_arn
  }

  secrets = {
    SECRET_KEY       = module.secrets.django_secret_key_arn
    MQTT_SERVICE_KEY = module.secrets.service_key_arn
    SEALING_KEY      = module.secrets.sealing_key_arn
    REDIS_URL        = module.secrets.redis_url_arn
    PGPASSWORD       = "${module.database.master_secret_arn}:password::"
  }

  task_security_groups = [
    module.web.security_group_id,
    module.broker.security_group_id,
    module.workers.security_group_id,
    module.spark.security_group_id,
  ]
}

module "observability" {
  source = "../observability"

  name                             = local.name
  region                           = var.region
  log_retention_days               = var.log_retention_days
  alarm_emails                     = var.alarm_emails
  nlb_arn_suffix                   = module.broker.nlb_arn_suffix
  broker_target_group_arn_suffixes = module.broker.target_group_arn_suffixes
  broker_connections_threshold     = var.broker_connections_alarm
  alb_arn_suffix                   = module.web.alb_arn_suffix
  db_instance_identifier           = module.database.instance_identifier
}

module "network" {
  source = "../network"

  name                 = local.name
  region               = var.region
  cidr                 = var.vpc_cidr
  az_count             = 3
  single_nat_gateway   = var.single_nat_gateway
  flow_log_kms_key_arn = module.observability.kms_key_arn
}

module "storage" {
  source = "../storage"

  name                                 = local.name
  archive_infrequent_access_after_days = var.archive_infrequent_access_after_days
  archive_glacier_after_days           = var.archive_glacier_after_days
}

module "database" {
  source = "../database"

  name                       = local.name
  vpc_id                     = module.network.vpc_id
  subnet_ids                 = module.network.data_subnet_ids
  allowed_security_group_ids = local.task_security_groups
  instance_class             = var.db_instance_class
  allocated_storage_gb       = var.db_allocated_storage_gb
  multi_az                   = var.db_multi_az
  backup_retention_days      = var.db_backup_retention_days
  deletion_protection        = var.deletion_protection
}

module "secrets" {
  source = "../secrets"

  name                    = local.name
  redis_endpoint          = module.cache.primary_endpoint
  recovery_window_in_days = var.secret_recovery_window_days
}

module "cache" {
  source = "../cache"

  name                       = local.name
  vpc_id                     = module.network.vpc_id
  subnet_ids                 = module.network.data_subnet_ids
  allowed_security_group_ids = local.task_security_groups
  node_type                  = var.cache_node_type
  num_cache_clusters         = var.cache_nodes
  auth_token                 = module.secrets.redis_auth_token
  slow_log_group_name        = module.observability.service_log_group_names["redis-slow-log"]
}

module "iam" {
  source = "../iam"

  name             = local.name
  account_id       = data.aws_caller_identity.current.account_id
  data_bucket_arn  = module.storage.data_bucket_arn
  data_kms_key_arn = module.storage.kms_key_arn
  secret_arns      = concat(module.secrets.secret_arns, [module.database.master_secret_arn])
  secret_kms_key_arns = [
    module.secrets.kms_key_arn,
    module.database.kms_key_arn,
  ]
  emr_application_arn = module.spark.application_arn
  emr_job_role_arn    = module.spark.job_role_arn
}

module "cluster" {
  source = "../cluster"

  name                = local.name
  kms_key_arn         = module.observability.kms_key_arn
  exec_log_group_name = module.observability.service_log_group_names["ecs-exec"]
}

module "web" {
  source = "../web"

  name                          = local.name
  region                        = var.region
  vpc_id                        = module.network.vpc_id
  public_subnet_ids             = module.network.public_subnet_ids
  private_subnet_ids            = module.network.private_subnet_ids
  certificate_arn               = var.portal_certificate_arn
  access_logs_bucket            = module.storage.logs_bucket
  waf_log_group_arn             = module.observability.waf_log_group_arn
  deletion_protection           = var.deletion_protection
  cluster_arn                   = module.cluster.arn
  cluster_name                  = module.cluster.name
  image                         = var.image
  cpu                           = var.web_cpu
  service_connect_namespace_arn = module.cluster.service_connect_namespace_arn
  memory                        = var.web_memory
  min_count                     = var.web_min_count
  max_count                     = var.web_max_count
  execution_role_arn            = module.iam.execution_role_arn
  task_role_arn                 = module.iam.task_role_arns["web"]
  environment                   = local.environment
  secrets                       = local.secrets
  log_group_name                = module.observability.log_group_names["web"]
}

module "broker" {
  source = "../broker"

  name                               = local.name
  region                             = var.region
  vpc_id                             = module.network.vpc_id
  public_subnet_ids                  = module.network.public_subnet_ids
  private_subnet_ids                 = module.network.private_subnet_ids
  internal_client_security_group_ids = [module.web.security_group_id]
  certificate_arn                    = var.mqtt_certificate_arn
  access_logs_bucket                 = module.storage.logs_bucket
  deletion_protection                = var.deletion_protection
  cluster_arn                        = module.cluster.arn
  cluster_name                       = module.cluster.name
  service_connect_namespace_arn      = module.cluster.service_connect_namespace_arn
  image                              = var.image
  cpu                                = var.broker_cpu
  memory                             = var.broker_memory
  min_count                          = var.broker_min_count
  max_count                          = var.broker_max_count
  connections_per_task_target        = var.broker_connections_per_task
  execution_role_arn                 = module.iam.execution_role_arn
  task_role_arn                      = module.iam.task_role_arns["broker"]
  environment                        = local.environment
  secrets                            = local.secrets
  log_group_name                     = module.observability.log_group_names["broker"]
}

module "workers" {
  source = "../workers"

  name               = local.name
  region             = var.region
  vpc_id             = module.network.vpc_id
  private_subnet_ids = module.network.private_subnet_ids
  cluster_arn        = module.cluster.arn
  cluster_name       = module.cluster.name
  image              = var.image
  worker_cpu         = var.worker_cpu
  worker_memory      = var.worker_memory
  worker_min_count   = var.worker_min_count
  worker_max_count   = var.worker_max_count
  rules_cpu          = var.rules_cpu
  rules_memory       = var.rules_memory
  execution_role_arn = module.iam.execution_role_arn
  task_role_arns     = module.iam.task_role_arns
  environment        = local.environment
  secrets            = local.secrets
  log_group_names    = module.observability.log_group_names
}

module "spark" {
  source = "../spark"

  name                        = local.name
  vpc_id                      = module.network.vpc_id
  private_subnet_ids          = module.network.private_subnet_ids
  max_vcpu                    = var.spark_max_vcpu
  max_memory                  = var.spark_max_memory
  image_uri                   = var.spark_image_uri
  data_bucket_arn             = module.storage.data_bucket_arn
  data_kms_key_arn            = module.storage.kms_key_arn
  database_secret_arn         = module.database.master_secret_arn
  database_secret_kms_key_arn = module.database.kms_key_arn
  log_group_name              = module.observability.service_log_group_names["emr-serverless"]
  log_group_arn               = module.observability.service_log_group_arns["emr-serverless"]
}

# One-off tasks run by the operator (infra/README.md): migrations before each upgrade, and the
# billing job by hand.
module "migrate_task" {
  source = "../task"

  name               = local.name
  role               = "migrate"
  image              = var.image
  cpu                = 512
  memory             = 1024
  execution_role_arn = module.iam.execution_role_arn
  task_role_arn      = module.iam.task_role_arns["migrate"]
  environment        = local.environment
  secrets            = local.secrets
  health_check       = false
  log_group_name     = module.observability.log_group_names["migrate"]
  region             = var.region
}

module "billing_task" {
  source = "../task"

  name               = local.name
  role               = "billing"
  image              = var.image
  cpu                = var.rules_cpu
  memory             = var.rules_memory
  execution_role_arn = module.iam.execution_role_arn
  task_role_arn      = module.iam.task_role_arns["billing"]
  # The one-off billing task runs the job itself (its role may not submit to EMR).
  environment    = merge(local.environment, { SPARK_MASTER = "local[*]", SPARK_RUNNER = "local" })
  secrets        = local.secrets
  health_check   = false
  log_group_name = module.observability.log_group_names["billing"]
  region         = var.region
}
