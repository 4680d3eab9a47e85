"""The Celery app. Broker and result backend: `REDIS_URL`, or the embedded Redis when unset.

Run a worker with `celery -A control_plane worker --beat` (make run starts one). Every process
that sends a task loads this app through `control_plane/__init__.py` (Django's usual
`celery_app` import): without it the web process sends to Celery's default AMQP address, where
nothing listens.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

from common.runtime import embedded  # noqa: E402

app = Celery("control_plane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.broker_connection_retry_on_startup = True
# A sender that cannot reach Redis finds out within seconds (the run it dispatches then fails
# with the reason), instead of retrying for minutes inside a web request.
app.conf.broker_transport_options = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5}


def _redis() -> dict[str, str]:
    """Resolved when Celery first needs its configuration, not at import: importing the
    project (every `manage.py` command does) must not start the embedded Redis."""
    url = os.environ.get("REDIS_URL") or embedded.redis_url()
    return {"broker_url": url, "result_backend": url}


app.add_defaults(_redis)
app.autodiscover_tasks()
