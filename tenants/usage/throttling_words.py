"""Words for what the tenant's limits did, and for every cause of a drop.

The broker names a limit by a short key when it slows something down (`quota.throttled`, metered
in `Usage.throttled`) or refuses something (`quota.exceeded`, metered in `Usage.dropped` as
`quota_<key>`). Here each key has the plan's quota key it enforces, what a slowdown and a refusal
mean, and what to do about them; each drop cause has a short phrase.
"""

from __future__ import annotations

from dataclasses import dataclass

QUOTA_CAUSE_PREFIX = "quota_"


@dataclass(frozen=True)
class LimitWords:
    quota_key: str | None  # the plan's key (max_publish_rate…); None for a key we don't know
    slowed: str  # what a slowdown means ("" where this limit never slows anything)
    refused: str  # what a refusal means
    advice: str
    refuses_messages: bool = True  # False: it refuses connections, subscriptions or sessions
    refused_phrase: str = ""  # a refusal as a drop cause, short ("refused over the publish rate")


LIMITS: dict[str, LimitWords] = {
    "publish_rate": LimitWords(
        "max_publish_rate",
        slowed="Your devices together published faster than the plan's publish rate: the broker "
        "stopped reading them until the rate allowed more. Nothing was lost; the messages "
        "arrived later.",
        refused="A publisher stayed over the rate for too long and the broker refused its "
        "messages (MQTT 5: PUBACK 0x97 Quota exceeded, or DISCONNECT 0x96 Message rate too "
        "high).",
        advice="Spread publishes out (batch readings into fewer, larger messages), or move to "
        "a plan with a higher publish rate. If one device floods, a per-device limit "
        "(max_device_publish_rate) keeps it from slowing the others.",
        refused_phrase="refused over the publish rate",
    ),
    "device_publish_rate": LimitWords(
        "max_device_publish_rate",
        slowed="A device published faster than the per-device limit: the broker stopped reading "
        "it until its rate allowed more. Nothing was lost; the other devices were not slowed.",
        refused="A device stayed over the per-device limit for too long and the broker refused "
        "its messages.",
        advice="Slow that device down (publish less often or batch readings), or raise "
        "max_device_publish_rate on a larger plan.",
        refused_phrase="refused over the per-device publish rate",
    ),
    "inbound_bytes_rate": LimitWords(
        "max_inbound_bytes_rate",
        slowed="Your devices sent more bytes per second than the plan's inbound bandwidth: the "
        "broker stopped reading them until the bandwidth allowed more. Nothing was lost.",
        refused="Publishes over the inbound bandwidth were refused.",
        advice="Send smaller payloads (compress them, send changes rather than full state), "
        "spread them out, or move to a plan with more bandwidth.",
        refused_phrase="refused over the inbound bandwidth",
    ),
    "outbound_rate": LimitWords(
        "max_outbound_bytes_rate",
        slowed="Deliveries to your subscribers were paced to the plan's outbound bandwidth: "
        "they arrived later, none was lost.",
        refused="Deliveries over the outbound bandwidth were refused.",
        advice="Subscribe to narrower topics so that fewer copies go out, send smaller "
        "payloads, or move to a plan with more bandwidth.",
        refused_phrase="refused over the outbound bandwidth",
    ),
    "message_size": LimitWords(
        "max_message_size",
        slowed="",
        refused="A message larger than the plan's message size limit was refused.",
        advice="Split or compress large payloads, or keep large data elsewhere and publish a "
        "reference to it.",
        refused_phrase="message too large",
    ),
    "retained": LimitWords(
        "max_retained_messages",
        slowed="",
        refused="A retained message on a new topic was refused: the tenant already holds as "
        "many retained messages as the plan allows.",
        advice="Clear retained topics you no longer need (publish an empty retained message "
        "to them), or move to a larger plan.",
        refused_phrase="retained message limit reached",
    ),
    "connections": LimitWords(
        "max_connections",
        slowed="",
        refused="A device could not connect: the tenant already had as many connections as "
        "the plan allows (CONNACK 0x97 Quota exceeded).",
        advice="Disconnect clients you no longer use, keep one connection per device, or move "
        "to a plan with more connections.",
        refuses_messages=False,
        refused_phrase="connections refused",
    ),
    "subscriptions": LimitWords(
        "max_subscriptions_per_client",
        slowed="",
        refused="A subscription was refused: the client already had as many subscriptions as "
        "the plan allows.",
        advice="Use wildcards (sensors/+/temp) instead of many exact topic filters.",
        refuses_messages=False,
        refused_phrase="subscriptions refused",
    ),
    "persistent_sessions": LimitWords(
        "max_persistent_sessions",
        slowed="",
        refused="A device asking for a session kept while offline could not connect: the "
        "tenant already keeps as many such sessions as the plan allows.",
        advice="Connect devices that need no offline queue with a session expiry of 0 (clean "
        "session), or move to a larger plan.",
        refuses_messages=False,
        refused_phrase="persistent sessions refused",
    ),
    "shadows": LimitWords(
        "max_shadows",
        slowed="",
        refused="A device shadow that did not exist yet was refused (AWS's 403 on "
        "…/update/rejected): the tenant already keeps as many shadows as the plan allows.",
        advice="Delete shadows (classic or named) you no longer use, or move to a larger plan.",
        refuses_messages=False,
        refused_phrase="new device shadows refused",
    ),
    "certificates": LimitWords(
        "max_certificates",
        slowed="",
        refused="A claim's request for a new certificate was refused (LimitExceeded on "
        "…/rejected): the tenant already has as many live certificates as the plan allows.",
        advice="Revoke certificates you no longer use, or move to a larger plan.",
        refuses_messages=False,
        refused_phrase="new certificates refused",
    ),
    "shared_groups": LimitWords(
        "max_shared_groups",
        slowed="",
        refused="A subscription to a new shared group ($share/{group}/{filter}) was refused "
        "(SUBACK 0x97): the tenant already has as many shared groups as the plan allows.",
        advice="Delete shared groups you no longer use (Shared groups page), or move to a "
        "larger plan.",
        refuses_messages=False,
        refused_phrase="new shared groups refused",
    ),
    "group_messages": LimitWords(
        "max_group_messages",
        slowed="",
        refused="A message for a shared group with no member was dropped: the group "
        "already held as many messages as the plan allows.",
        advice="Keep a member of the group online, or move to a plan whose groups keep more.",
        refuses_messages=True,
        refused_phrase="messages a shared group could not keep",
    ),
    "group_bytes": LimitWords(
        "max_group_bytes",
        slowed="",
        refused="A message for a shared group with no member was dropped: the group "
        "already held as many payload bytes as the plan allows.",
        advice="Keep a member of the group online, or move to a plan whose groups keep more.",
        refuses_messages=True,
        refused_phrase="messages a shared group could not keep",
    ),
    # Refused by the control plane (tenants/quota_refusals.py), not the broker.
    "alarms": LimitWords(
        "max_alarms",
        slowed="",
        refused="An alarm definition could not be created: the tenant already had as many "
        "alarm definitions as the plan allows.",
        advice="Delete alarm definitions you no longer use (Alarm definitions page), or move "
        "to a larger plan.",
        refuses_messages=False,
        refused_phrase="alarm definitions refused",
    ),
    # Refused by the live rules job (spark/rules/alarms.py): a key its alarms did not watch.
    "alarm_keys": LimitWords(
        "max_alarm_keys",
        slowed="",
        refused="An alarm did not start watching a new key (a device, or the key its definition "
        "names): the tenant's alarms already kept as many states as the plan allows.",
        advice="Narrow the alarms' sources or keys, delete alarms you no longer use, or move to "
        "a larger plan.",
        refuses_messages=False,
        refused_phrase="alarm keys not watched",
    ),
    # Refused by the live rules job (spark/rules/outbox.py): an output its sink's outbox could
    # not keep (the sink down or slow for long), kept as a dead letter instead.
    "sink_outbox": LimitWords(
        "max_sink_outbox_messages",
        slowed="",
        refused="A rule output for a sink became a dead letter instead of waiting in the sink's "
        "outbox: the outbox already held as many outputs (or bytes) as the plan allows, while "
        "the sink was down or slower than the rule.",
        advice="Check the sink's state and last error (Sinks page), bring it back, then replay "
        "the rule's dead letters; or move to a plan whose outboxes keep more.",
        refuses_messages=False,
        refused_phrase="sink outputs not kept",
    ),
    "ca_certificates": LimitWords(
        "max_ca_certificates",
        slowed="",
        refused="A CA certificate could not be registered: the tenant already had as many CAs "
        "registered as the plan allows.",
        advice="Revoke CAs you no longer use (their devices can no longer connect with "
        "certificates they signed), or move to a plan that allows more CAs.",
        refuses_messages=False,
        refused_phrase="CA registrations refused",
    ),
    "ca_registration_rate": LimitWords(
        None,
        slowed="",
        refused="A CA registration was refused: CAs were registered too often (a 429 with "
        "Retry-After); the same registration a little later is accepted.",
        advice="Register CAs one at a time, waiting as the answer says; none of them is lost.",
        refuses_messages=False,
        refused_phrase="CA registrations refused as too frequent",
    ),
    # Not a plan's quota: the tenant's own budget, set to degrade at 100 % (tenants/budgets/services.py).
    "budget": LimitWords(
        None,
        slowed="",
        refused="A device could not connect: the tenant's monthly budget was reached and the "
        'budget says degrade (CONNACK 0x97 Quota exceeded, reason "monthly budget reached"). '
        "Devices already connected kept working.",
        advice="Raise the budget, or set it to notify only, on the Budget page: new "
        "connections are accepted again at once.",
        refuses_messages=False,
        refused_phrase="connections refused over the monthly budget",
    ),
}

# Drop causes that are not a limit's refusal (data_plane/broker/session.py): a copy of a message
# that was not delivered to one subscriber.
DROP_CAUSES: dict[str, str] = {
    "queue_full": "queue full",
    "offline_qos0": "QoS 0 for an offline client",
    "expired": "expired before delivery",
    "too_large": "larger than the subscriber accepts",
    "acl": "no longer allowed by the ACL",
    "group_full": "shared group full",
    "not_authorized": "no shared group member may read it",
}

# What each drop cause means, for the page's explanation.
DROP_MEANINGS: dict[str, str] = {
    "queue_full": "a subscriber read more slowly than messages arrived and its queue was full "
    "(max_queued_messages; 100 for QoS 0)",
    "offline_qos0": "a QoS 0 message for a client that was offline (QoS 0 is not kept)",
    "expired": "a message's expiry interval passed before the subscriber took it",
    "too_large": "a message was larger than the subscriber's Maximum Packet Size",
    "acl": "a queued copy the subscriber's ACL no longer allowed",
    "not_authorized": "a message a shared group kept that none of its members may read (their "
    "ACL), dropped when the group handed its messages on",
    "group_full": "a shared group with no member already held as many messages or bytes "
    "as it may keep (max_group_messages, max_group_bytes)",
}


def limit_words(key: str) -> LimitWords:
    """The words for a limit the broker named; a key we don't know is shown as it is."""
    known = LIMITS.get(key)
    if known is not None:
        return known
    return LimitWords(
        None,
        slowed=f"The {key} limit slowed something down.",
        refused=f"The {key} limit refused something.",
        advice="",
        refused_phrase=f"refused by {key.replace('_', ' ')}",
    )


def cause_limit(cause: str) -> str | None:
    """The limit a drop cause is a refusal of (`quota_publish_rate` -> `publish_rate`)."""
    return cause[len(QUOTA_CAUSE_PREFIX) :] if cause.startswith(QUOTA_CAUSE_PREFIX) else None


def is_message_drop(cause: str) -> bool:
    """Whether the cause is a message (or a copy of one) not taken or not delivered, rather than
    a connection, subscription or session refused."""
    key = cause_limit(cause)
    return key is None or limit_words(key).refuses_messages


def cause_phrase(cause: str) -> str:
    """A drop cause in a few words ("queue full", "message too large")."""
    key = cause_limit(cause)
    if key is not None:
        return limit_words(key).refused_phrase
    return DROP_CAUSES.get(cause, cause.replace("_", " "))
