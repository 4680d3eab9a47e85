"""Django settings. Every deployment knob is an environment variable with an embedded default.

`DATABASE_URL` / `REDIS_URL` unset: a private Postgres / Redis under `.data/` is started on demand
(see `common.runtime.embedded`). Production sets them (plus `SECRET_KEY`, `SEALING_KEY`,
`DJANGO_DEBUG=0`, `ALLOWED_HOSTS`).
"""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from celery.schedules import crontab

from common.contracts import notifications
from common.runtime import embedded, logs

BASE_DIR = Path(__file__).resolve().parent.parent

# `DJANGO_DEBUG` (1 unless set: the embedded platform, `make run`) is development: a built-in
# SECRET_KEY, cookies over plain HTTP, static files straight from the apps. Django's own DEBUG,
# whose error pages show a traceback, the settings and the URL list to whoever caused the error
# (a tenant's request, a rule's dry run), is never on by default, not even there: a developer
# who wants those pages sets DJANGO_DEBUG_PAGES=1 as well.
DEVELOPMENT = os.environ.get("DJANGO_DEBUG", "1") == "1"
DEBUG = DEVELOPMENT and os.environ.get("DJANGO_DEBUG_PAGES", "0") == "1"
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEVELOPMENT:
        raise RuntimeError("SECRET_KEY must be set when DJANGO_DEBUG=0")
    SECRET_KEY = "insecure-development-key-only-for-the-embedded-default"
if not DEVELOPMENT and not os.environ.get("SEALING_KEY"):
    # Else each container would seal webhook secrets under its own `.data/sealing-key`, and the
    # rule jobs could not open what the portal sealed (common/security/sealed.py).
    raise RuntimeError("SEALING_KEY must be set when DJANGO_DEBUG=0")
ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "control_plane",
    "tenants",
]

MIDDLEWARE = [
    "control_plane.access_log.access_log",  # outermost: every request, in the one log format
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tenants.audit.AuditActorMiddleware",  # who/where for the audit log
    "control_plane.security_headers.SecurityHeadersMiddleware",  # CSP, Referrer-Policy
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "control_plane.urls"
WSGI_APPLICATION = "control_plane.wsgi.application"
ASGI_APPLICATION = "control_plane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tenants.portal.context.account",
            ],
        },
    }
]

DATABASE_URL = os.environ.get("DATABASE_URL") or embedded.postgres_url()
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
REDIS_URL = os.environ.get("REDIS_URL", "")  # resolved lazily: only Celery/Channels need it

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "portal:login"
LOGIN_REDIRECT_URL = "portal:dashboard"
LOGOUT_REDIRECT_URL = "portal:login"

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = not DEVELOPMENT
CSRF_COOKIE_SECURE = not DEVELOPMENT
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
if not DEVELOPMENT:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "3600"))

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
FORMAT_MODULE_PATH = ["control_plane.formats"]  # dates and times shown with their time zone
USE_TZ = True
STATIC_URL = "static/"
# The container image collects them at build time into its read-only /app/static.
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT") or BASE_DIR / ".data" / "staticfiles")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Development serves static files straight from the apps; production runs collectstatic.
WHITENOISE_USE_FINDERS = DEVELOPMENT

# Mail (invitations, password resets): printed to the console unless an SMTP server is set.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_BACKEND = os.environ.get(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "587"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = os.environ.get("EMAIL_USE_TLS", "1") not in ("0", "false", "False", "")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "MQTT platform <noreply@localhost>")
# The portal's address as users reach it: links printed by commands (create_tenant --owner).
# Job artifacts (tenants.jobs.artifacts): the largest upload, in bytes.
JOB_ARTIFACT_MAX_BYTES = int(os.environ.get("JOB_ARTIFACT_MAX_BYTES", str(64 * 1024 * 1024)))
PORTAL_URL = os.environ.get("PORTAL_URL", f"http://127.0.0.1:{os.environ.get('WEB_PORT', '8000')}")

# Where devices reach the broker, shown in the portal.
MQTT_PUBLIC_HOST = os.environ.get("MQTT_PUBLIC_HOST", "127.0.0.1")
MQTT_PUBLIC_PORT = int(os.environ.get("MQTT_PUBLIC_PORT", "1883"))
MQTT_PUBLIC_WS_URL = os.environ.get("MQTT_PUBLIC_WS_URL", "ws://127.0.0.1:8083/mqtt")
# The broker's TLS listener as devices reach it (mqtts://MQTT_PUBLIC_HOST:port), None where the
# broker has none: the port a load balancer shows, else the broker's own MQTT_TLS_PORT.
MQTT_PUBLIC_TLS_PORT = (
    int(os.environ.get("MQTT_PUBLIC_TLS_PORT") or os.environ.get("MQTT_TLS_PORT") or 0) or None
)
# The CA that signed the broker's TLS certificate (a PEM file), which devices trust the broker
# with: the portal offers it as broker-ca.pem. Unset: a public CA the devices already trust.
MQTT_PUBLIC_CA_FILE = os.environ.get("MQTT_PUBLIC_CA_FILE", "")
# Where the portal's live views reach a broker (as each tenant's read-only service identity,
# authenticated with a token signed by MQTT_SERVICE_KEY, shared with the brokers).
MQTT_INTERNAL_HOST = os.environ.get("MQTT_INTERNAL_HOST", "127.0.0.1")
MQTT_INTERNAL_PORT = int(os.environ.get("MQTT_INTERNAL_PORT", str(MQTT_PUBLIC_PORT)))
# Live pages (/ws/live/ sockets) a member and a tenant may hold at once: counted in each web
# process and, where REDIS_URL names a Redis, across all of them (tenants/portal/live_seats.py).
LIVE_SOCKETS_PER_MEMBER = int(os.environ.get("LIVE_SOCKETS_PER_MEMBER", "5"))
LIVE_SOCKETS_PER_TENANT = int(os.environ.get("LIVE_SOCKETS_PER_TENANT", "20"))
LIVE_SEATS_REDIS_URL = REDIS_URL
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "tenants.api.errors.exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "tenants.api.parsers.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
# Login and signup attempts (API and portal) per client address and per account (email);
# X-Forwarded-For is believed only from these proxies (addresses or CIDR networks).
AUTH_THROTTLE_RATE = os.environ.get("AUTH_THROTTLE_RATE", "20/min")
AUTH_ACCOUNT_THROTTLE_RATE = os.environ.get("AUTH_ACCOUNT_THROTTLE_RATE", "10/min")
# Password-reset mails: per client address, and per account named (tenants/accounts/throttles.py).
PASSWORD_RESET_THROTTLE_RATE = os.environ.get("PASSWORD_RESET_THROTTLE_RATE", "10/h")
PASSWORD_RESET_ACCOUNT_RATE = os.environ.get("PASSWORD_RESET_ACCOUNT_RATE", "3/h")
# CA certificate registrations per tenant (attempts; tenants/devices/identity.py): more is a 429.
CA_REGISTRATION_RATE = os.environ.get("CA_REGISTRATION_RATE", "10/min")
TRUSTED_PROXIES = [p for p in os.environ.get("TRUSTED_PROXIES", "").split(",") if p.strip()]
SPECTACULAR_SETTINGS = {
    "TITLE": "MQTT platform API",
    "DESCRIPTION": "Provision devices, credentials, ACLs, rules and read quotas and usage.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Every operation's summary, description and resource tag (tenants/api/docs.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "tenants.api.docs.describe_operations",
    ],
    # Swagger UI served from our own static files: no CDN needed.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # ACL permissions and the tenant's ACL default share one allow/deny choice set.
    "ENUM_NAME_OVERRIDES": {
        "AllowDenyEnum": ["allow", "deny"],
        "AclActionEnum": ["publish", "subscribe", "both"],
        "AclTestActionEnum": ["publish", "subscribe"],
    },
}

# Caches back the API throttles; one process in the embedded default.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# Seconds between two checks that an open live page's login still stands (tenants/portal/live.py).
LIVE_SESSION_RECHECK = float(os.environ.get("LIVE_SESSION_RECHECK", "30"))

# Celery reads CELERY_* (see control_plane/celery.py); the broker URL is resolved there.
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Billing: last month is drafted on the 1st and issued once BILLING_GRACE_DAYS are over (late
# usage inside the grace period is billed in place; after it, as an adjustment next month).
BILLING_GRACE_DAYS = int(os.environ.get("BILLING_GRACE_DAYS", "3"))
# Invoices (tenants/billing/invoicing.py): who issues them (copied onto each invoice when it is issued),
# their numbers (`INVOICE_NUMBER_PREFIX` + a sequence per `INVOICE_ISSUER_KEY`, never reused),
# payment terms and tax (a percentage of the lines' total; 0: no tax line).
INVOICE_ISSUER = {
    "key": os.environ.get("INVOICE_ISSUER_KEY", "platform"),
    "name": os.environ.get("INVOICE_ISSUER_NAME", "MQTT platform"),
    # Lines separated by newlines (or a literal \n in a one-line variable).
    "address": os.environ.get("INVOICE_ISSUER_ADDRESS", "").replace("\\n", "\n"),
    "tax_id": os.environ.get("INVOICE_ISSUER_TAX_ID", ""),
    "email": os.environ.get("INVOICE_ISSUER_EMAIL", ""),
}
INVOICE_NUMBER_PREFIX = os.environ.get("INVOICE_NUMBER_PREFIX", "INV-")
INVOICE_DUE_DAYS = int(os.environ.get("INVOICE_DUE_DAYS", "30"))
INVOICE_TAX_RATE = os.environ.get("INVOICE_TAX_RATE", "0")  # percent: 20, 8.875
INVOICE_TAX_NAME = os.environ.get("INVOICE_TAX_NAME", "Tax")
CELERY_BEAT_SCHEDULE = {
    "billing-draft": {
        "task": "tenants.tasks.billing_draft_previous_month",
        "schedule": crontab(day_of_month="1", hour="1", minute="0"),
    },
    "usage-log-rollup": {
        "task": "tenants.tasks.usage_log_rollup",
        "schedule": timedelta(seconds=int(os.environ.get("USAGE_ROLLUP_SECONDS", "60"))),
    },
    "billing-issue": {
        "task": "tenants.tasks.billing_issue_due",
        "schedule": crontab(hour="2", minute="0"),
    },
    "expire-credentials": {
        "task": "tenants.tasks.expire_credentials",
        "schedule": timedelta(seconds=int(os.environ.get("CREDENTIAL_EXPIRY_SWEEP_SECONDS", "60"))),
    },
    "fleet-certificates-purge": {  # fleet provisioning's certificates never registered
        "task": "tenants.tasks.fleet_certificates_purge",
        "schedule": timedelta(hours=1),
    },
    # Storage byte-hours: one sample per hour for every tenant (tenants.usage.storage); runs
    # every 15 minutes so a missed beat is caught within the hour, and writes once per hour.
    "sample-storage": {
        "task": "tenants.tasks.sample_storage",
        "schedule": timedelta(seconds=int(os.environ.get("STORAGE_SAMPLE_SECONDS", "900"))),
    },
    # Hours closed for 5 minutes get compacted within the next 10 (common.archive.files).
    "compact-archive": {
        "task": "tenants.tasks.compact_archive",
        "schedule": timedelta(seconds=int(os.environ.get("ARCHIVE_COMPACTION_SECONDS", "600"))),
    },
    # The journey: hours compacted (the open one every ~5 minutes), hours past each plan's
    # retention deleted (tenants.journey.upkeep).
    "journey-upkeep": {
        "task": "tenants.tasks.journey_upkeep",
        "schedule": timedelta(seconds=int(os.environ.get("JOURNEY_UPKEEP_SECONDS", "300"))),
    },
    # History older than each tenant keeps, deleted by whole hours (tenants.history.retention).
    "history-retention": {
        "task": "tenants.tasks.history_retention",
        "schedule": timedelta(seconds=int(os.environ.get("HISTORY_RETENTION_SECONDS", "3600"))),
    },
    # Budgets: the month to date against each budget, alerts, the spend control set or lifted
    # on every broker node within this many seconds of the usage reaching Postgres.
    "budget-check": {
        "task": "tenants.tasks.budget_check",
        "schedule": timedelta(seconds=int(os.environ.get("BUDGET_CHECK_SECONDS", "60"))),
    },
    # The alarms' emails (tenants.alarms.emails): the outbox's due rows sent, each on its own.
    "alarm-emails": {
        "task": "tenants.tasks.alarm_emails",
        "schedule": timedelta(seconds=int(os.environ.get("ALARM_EMAIL_SECONDS", "5"))),
    },
    # Device shadows' past versions older than the plan's shadow_history_days.
    "shadow-history-purge": {
        "task": "tenants.tasks.shadow_history_purge",
        "schedule": timedelta(hours=1),
    },
    # Jobs (tenants.jobs.services): executions IN_PROGRESS past their timeout become TIMED_OUT
    # (or are retried), abort criteria are checked, rollouts release their next devices, and
    # the executions queued go to the usage log (tenants.jobs.metering).
    "jobs-upkeep": {
        "task": "tenants.tasks.jobs_upkeep",
        "schedule": timedelta(seconds=int(os.environ.get("JOBS_UPKEEP_SECONDS", "60"))),
    },
    "job-announcements-purge": {
        "task": "tenants.tasks.job_announcements_purge",
        "schedule": timedelta(hours=1),
    },
    # Runs over history whose worker was lost: failed, their unconfirmed action claims given back
    # (tenants.rules.runs.services.runs_reclaim), so the next `new-only` run fires those actions.
    "reclaim-rule-runs": {
        "task": "tenants.tasks.reclaim_rule_runs",
        "schedule": timedelta(seconds=int(os.environ.get("RULE_RUN_RECLAIM_SECONDS", "60"))),
    },
    # The ledger of rule actions done forgets messages older than RULE_LEDGER_DAYS (tenants.rules.runs).
    "prune-action-ledger": {
        "task": "tenants.tasks.prune_action_ledger",
        "schedule": crontab(hour="3", minute="30"),
    },
}

# The single Postgres channel every broker-relevant change is announced on (common/contracts/notifications.py).
CONFIG_NOTIFY_CHANNEL = notifications.CHANNEL

# One format for every process (web, broker, workers): text, or JSON lines with LOG_FORMAT=json.
LOGGING = logs.dict_config()
# Celery keeps the format above instead of installing its own on the root logger.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
