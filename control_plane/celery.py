"""The Celery app. Broker and result backend: `REDIS_URL`, or the embedded Redis when unset.

Run a worker with `celery -A control_plane worker --beat` (make run starts one).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

from common.runtime import embedded  # noqa: E402

app = Celery("control_plane")
app.config_from_object("django.conf:settings", namespace="CELERY")
_redis = os.environ.get("REDIS_URL") or embedded.redis_url()
app.conf.broker_url = _redis
app.conf.result_backend = _redis
app.conf.broker_connection_retry_on_startup = True
app.autodiscover_tasks()
