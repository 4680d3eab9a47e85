"""Internal service identities: the portal's live views and the rule jobs' republish action.

The portal connects as `{tenant}/$portal` with client id `$portal-{random}`; the rule jobs as
`{tenant}/$rules` with client id `$rules-{…}`; each with a short-lived token signed with the key
shared with the brokers (`common.service_token`: `MQTT_SERVICE_KEY`, or the embedded default file
`.data/service-key`). Such a connection lives in that tenant's namespace like any device. The
portal's may subscribe (never to a shared group, which would take messages from the tenant's
consumers) and never publish; the rules' may publish to the tenant's application topics and never
subscribe. Neither is one of the tenant's connections: not counted against its quota, not in its
`$SYS` or `$events`. Device names cannot start with `$`, and devices may not use `$`-client ids,
so no device can pose as either.
"""

from __future__ import annotations

from common.service_token import (  # noqa: F401  (re-exported: the broker's names for them)
    CLIENT_PREFIXES,
    CONSOLE_DEVICE,
    DEFAULT_KEY_FILE,
    PORTAL_DEVICE,
    RULES_DEVICE,
    load_key,
    new_client_id,
    sign,
    verify,
)

SERVICE_DEVICE = PORTAL_DEVICE
SERVICE_DEVICES = frozenset(CLIENT_PREFIXES)
CLIENT_PREFIX = CLIENT_PREFIXES[PORTAL_DEVICE]


class ReadOnly:
    """The portal identity's authorizer: subscribe within the tenant, never publish."""

    def can_publish(self, topic: str) -> bool:
        return False

    def can_subscribe(self, topic_filter: str) -> bool:
        return not topic_filter.startswith("$share/")


class PublishOnly:
    """The rules identity's authorizer: publish to the tenant's own topics, never subscribe.

    `$`-topics are the broker's (`$SYS`, `$events`): a rule may not forge them."""

    def can_publish(self, topic: str) -> bool:
        return not topic.startswith("$")

    def can_subscribe(self, topic_filter: str) -> bool:
        return False


class Console:
    """The browser MQTT client of a portal member who may write: publish to the tenant's own
    topics (never the broker's `$`-topics), subscribe within the tenant (never to a shared group,
    which would take messages from the tenant's consumers)."""

    def can_publish(self, topic: str) -> bool:
        return not topic.startswith("$")

    def can_subscribe(self, topic_filter: str) -> bool:
        return not topic_filter.startswith("$share/")


def authorizer(device: str) -> ReadOnly | PublishOnly | Console:
    if device == RULES_DEVICE:
        return PublishOnly()
    return Console() if device == CONSOLE_DEVICE else ReadOnly()
