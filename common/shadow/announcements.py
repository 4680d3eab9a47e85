"""How the control plane has a broker publish the replies of a shadow change it made (the REST
API): the change's history row (`tenants_shadowversion`) carries the replies (`replies`: a list of
[topic, body] pairs, `published_at` null), and `pg_notify(CHANNEL, {"id": row id})` is sent in the
writing transaction, so it arrives only on commit. Every broker listens; the one whose
`UPDATE … SET published_at = now() WHERE published_at IS NULL` takes the row publishes its
replies through its ordinary publish path (so they reach subscribers on every node, once). A
broker whose listener reconnects takes the rows it may have missed, up to `CATCH_UP_SECONDS` old.
"""

from __future__ import annotations

import json

CHANNEL = "mqtt_shadow"
CATCH_UP_SECONDS = 60


def payload(version_id: int) -> str:
    return json.dumps({"id": version_id})


def version_id(text: str) -> int | None:
    try:
        value = json.loads(text).get("id")
    except (ValueError, AttributeError):
        return None
    return value if type(value) is int else None
