"""How the control plane has a broker publish the notifications of a jobs change it made (a job
created or cancelled through the REST API, executions timed out by Celery beat): the change's
row in `tenants_jobannouncement` carries the messages (`replies`: a list of [topic, body] pairs,
`published_at` null) and `pg_notify(CHANNEL, {"id": row id})` is sent in the writing
transaction. Every broker listens; the one whose `UPDATE … SET published_at = now() WHERE
published_at IS NULL` takes the row publishes them (the shadows' way:
`common.shadow.announcements`)."""

from __future__ import annotations

import json

CHANNEL = "mqtt_jobs"
CATCH_UP_SECONDS = 60


def payload(announcement_id: int) -> str:
    return json.dumps({"id": announcement_id})
