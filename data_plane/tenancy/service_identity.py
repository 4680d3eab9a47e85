"""Identities proved by a token the platform signs: the portal's live views and the rule jobs'
republish action (the platform's own), and the portal's browser MQTT client (the tenant's: held
to its ACL and quota and metered like a device named `$console` or `$viewer`, see
`common.security.service_token`).

The portal connects as `{tenant}/$portal` with client id `$portal-{random}`; the rule jobs as
`{tenant}/$rules` with client id `$rules-{…}`; each with a short-lived token signed with the key
shared with the brokers (`common.security.service_token`: `MQTT_SERVICE_KEY`, or the embedded default file
`.data/service-key`). Such a connection lives in that tenant's namespace like any device. The
portal's may subscribe (never to a shared group, which would take messages from the tenant's
consumers) and never publish; the rules' may publish to the tenant's application topics and never
subscribe. Neither is one of the tenant's connections: not counted against its connection quota,
not in its `$SYS` or `$events`. What the rules republish is the tenant's traffic, though: it
shares the tenant's publish rates with its devices (slowed like them, `RULES_QUOTA_KEYS`) and is
metered as the tenant's messages (`common.security.service_token.is_platform_client`). Device names cannot
start with `$`, and devices may not use `$`-client ids, so no device can pose as either.
"""

from __future__ import annotations

from typing import Any

from common.security.service_token import (  # noqa: F401  (re-exported: the broker's names for them)
    CLIENT_PREFIXES,
    CONSOLE_DEVICE,
    DEFAULT_KEY_FILE,
    PORTAL_DEVICE,
    RULES_DEVICE,
    TENANT_DEVICES,
    VIEWER_DEVICE,
    load_key,
    new_client_id,
    sign,
    verify,
)

SERVICE_DEVICE = PORTAL_DEVICE
SERVICE_DEVICES = frozenset(CLIENT_PREFIXES)  # every identity proved by a signed token
# Of those, the platform's own: not the tenant's clients (not counted, metered or limited). The
# browser client's (`$console`, `$viewer`) are tenant clients held to the tenant's ACL and quota.
PLATFORM_DEVICES = SERVICE_DEVICES - TENANT_DEVICES
CLIENT_PREFIX = CLIENT_PREFIXES[PORTAL_DEVICE]


# What the rules' republish is held to of its tenant's plan: the tenant's publish rates, shared
# fairly with its devices (it is slowed like them, never refused at first: `fair_share`).
RULES_QUOTA_KEYS = (
    "max_publish_rate",
    "max_inbound_bytes_rate",
    "max_outbound_bytes_rate",  # (it never subscribes: with the others, the tenant's buckets)
    "max_message_size",
)


def quota(device: str, tenant_quota: dict[str, int]) -> dict[str, int]:
    """The part of the tenant's quota a platform identity is held to."""
    if device != RULES_DEVICE:
        return {}
    return {key: tenant_quota[key] for key in RULES_QUOTA_KEYS if key in tenant_quota}


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


class Viewer:
    """The browser MQTT client of a member who may only read: the tenant's ACL for a device named
    `$viewer` (what it may subscribe to and receive), and never a publish."""

    __slots__ = ("acl", "filters_reads")

    def __init__(self, acl: Any) -> None:
        self.acl = acl
        self.filters_reads = getattr(acl, "filters_reads", False)

    def can_publish(self, topic: str) -> bool:
        return False

    def can_subscribe(self, topic_filter: str) -> bool:
        return self.acl.can_subscribe(topic_filter)

    def can_receive(self, topic: str) -> bool:
        return self.acl.can_receive(topic)


def authorizer(device: str) -> ReadOnly | PublishOnly:
    """A platform identity's rights (the browser client's are the tenant's ACL: `store`)."""
    return PublishOnly() if device == RULES_DEVICE else ReadOnly()
