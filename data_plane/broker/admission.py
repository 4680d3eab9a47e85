"""PUBLISH and SUBSCRIBE admission: what the broker does with a client's packet, decided without
touching the connection (enhanced auth's `Continue | Succeed | Fail` is the model).

`PublishAdmission.admit` returns one of

- `Accept(message, delay, service)`: route it (`delay`: a `$delayed/{seconds}/...` publish), or
  hand it to `service` (a device shadow or jobs request, `ports.Shadows`) instead;
- `Duplicate()`: a resend of a publish already taken (QoS 2: its packet id is held; QoS 1: a DUP
  with the packet id, topic and payload of a recent one, `resends`): acknowledge again, deliver
  nothing;
- `Refuse(reason_code, reason)`: 5.0 negative acknowledgement; 3.1.1 acknowledges and drops;
- `Disconnect(reason_code, reason)`: the connection ends;
- `Pause(quota)`: over a publish rate: stop reading; the tenant's share (`fair_share`) wakes the
  connection when this packet's turn comes, and it is tried again then.

Every decision carries what it counts (`quota`: the quota key exceeded, or for `Pause` the one
that slowed it, for $SYS and the hooks; `counts`: the tenant statistics to bump), which the
connection applies before acting. The admission keeps the state of its connection's inbound
side: topic aliases and rate strikes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.access.acl import reserved_default
from common.mqtt.errors import MQTTError, TopicFilterInvalid
from common.mqtt.packets import MQTT_5_0, Publish, Subscribe, Subscription
from common.mqtt.reason_codes import ReasonCode as RC
from common.mqtt.topics import (
    REPLAY_PREFIX,
    SHARE_PREFIX,
    parse_replay,
    routed_filter,
    validate_topic_name,
)
from data_plane.broker.auth import AuthResult
from data_plane.broker.fair_share import OverTooLong, over_the_rate
from data_plane.broker.limits import MAX_DELAY, too_deep
from data_plane.broker.message import Message, Origin
from data_plane.broker.ports import Shadows
from data_plane.broker.resends import SLOTS, RecentPublishes
from data_plane.broker.retained import RetainedStore
from data_plane.broker.session import SubscriptionState
from data_plane.config import BrokerConfig

# 5.0 refusals in a row (each after `fair_share.PATIENCE` over the rate) that end the connection.
RATE_STRIKES_BEFORE_DISCONNECT = 100


@dataclass(slots=True)
class Accept:
    message: Message
    delay: int | None = None
    service: Shadows | None = None  # the shadow or jobs service the request goes to, not the router


@dataclass(frozen=True, slots=True)
class Duplicate:
    pass


@dataclass(frozen=True, slots=True)
class Refuse:
    reason_code: int
    reason: str = ""
    quota: str | None = None
    counts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Disconnect:
    reason_code: int
    reason: str = ""
    quota: str | None = None
    counts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Pause:
    quota: str
    counts: tuple[str, ...] = ()


PublishDecision = Accept | Duplicate | Refuse | Disconnect | Pause
_DUPLICATE = Duplicate()


class PublishAdmission:
    """The checks every PUBLISH passes, in the order the broker has always applied them."""

    __slots__ = (
        "protocol_version",
        "tenant",
        "client_id",
        "device",
        "auth",
        "retained",
        "alias_maximum",
        "receive_maximum",
        "share",
        "waiter",
        "recent",
        "strikes",
        "aliases",
        "origin",
        "shadows",
    )

    def __init__(
        self, config: BrokerConfig, retained: RetainedStore, shadows: Shadows | None = None
    ) -> None:
        self.alias_maximum = config.topic_alias_maximum
        self.receive_maximum = config.receive_maximum
        self.retained = retained  # the broker's RetainedStore (count/has, for the quota)
        self.protocol_version = 4
        self.tenant = self.client_id = self.device = ""
        self.auth: Any = None  # the AuthResult: acl and quota (re-read on a policy change)
        self.share: Any = None  # the tenant's PublishShare, when its publishes are limited
        self.waiter: Any = None  # who the share wakes when a held publish may go (the gate)
        self.recent = RecentPublishes()  # the last QoS 1 publishes taken, to know a resend
        self.strikes = 0
        self.aliases: dict[int, str] = {}
        self.origin: Origin | None = None
        self.shadows = shadows  # the broker's shadow service (`$aws/…` requests), if any

    def begin(
        self, auth: AuthResult, protocol_version: int, client_id: str, recent: RecentPublishes
    ) -> None:
        """The identity CONNACK settled: publishes are judged for it from now on (`recent`:
        what its client id's previous connection took, to know its resends)."""
        self.auth, self.protocol_version, self.client_id = auth, protocol_version, client_id
        self.recent = recent
        self.tenant, self.device = auth.tenant, auth.device
        # One per connection: the archive keys its per-batch table of publishers by it.
        self.origin = Origin(self.tenant, client_id, self.device)

    def admit(self, packet: Publish, inbound_qos2: set[int]) -> PublishDecision:
        v5 = self.protocol_version == MQTT_5_0
        topic = packet.topic
        if v5 and "topic_alias" in packet.properties:
            alias = packet.properties["topic_alias"]
            if alias > self.alias_maximum:
                return Disconnect(RC.TOPIC_ALIAS_INVALID)
            if topic:
                self.aliases[alias] = topic
            else:
                topic = self.aliases.get(alias, "")
                if not topic:
                    return Disconnect(RC.PROTOCOL_ERROR, "unknown topic alias")
        qos = packet.qos
        if qos == 1:
            if packet.dup and self.recent.is_resend(packet.packet_id, topic, packet.payload):  # type: ignore[arg-type]  # QoS 1: it has an id (codec)
                return _DUPLICATE  # its PUBACK was lost: acknowledge again, deliver nothing
        elif qos == 2:
            if packet.packet_id in inbound_qos2:
                return _DUPLICATE  # a resend of a QoS 2 PUBLISH we already took
            if len(inbound_qos2) >= self.receive_maximum:
                return Disconnect(
                    RC.RECEIVE_MAXIMUM_EXCEEDED,
                    f"more than {self.receive_maximum} QoS 2 publishes awaiting PUBREL "
                    "(the Receive Maximum of CONNACK)",
                )
        quota = self.auth.quota
        max_size = quota.get("max_message_size")
        if max_size is not None and len(packet.payload) > max_size:
            # 0x95 is a DISCONNECT code (PUBACK cannot carry it), and 3.1.1 has no negative
            # acknowledgement: either way the connection ends, so that what was dropped is
            # never acknowledged as taken.
            return Disconnect(
                RC.PACKET_TOO_LARGE,
                f"message of {len(packet.payload)} bytes is larger than the plan's "
                f"max_message_size of {max_size} bytes",
                "message_size",
                ("dropped",),
            )
        share = self.share
        if share is not None and (not share.quiet or share.rates.admit(len(packet.payload))):
            # Someone waits already, or the bucket cannot pay: the share decides whose turn.
            held = share.take(self.waiter, self.device, len(packet.payload), v5 and qos > 0)
            if held is not None:
                if type(held) is not OverTooLong:
                    return Pause(held.quota)  # slowed: tried again when its turn comes
                # PUBACK/PUBREC cannot carry 0x96 (a DISCONNECT code): Quota exceeded.
                self.strikes += 1
                reason = over_the_rate(held.quota, share.quota, share.patience)
                if self.strikes >= RATE_STRIKES_BEFORE_DISCONNECT:
                    return Disconnect(
                        RC.MESSAGE_RATE_TOO_HIGH, reason, held.quota, ("rate_limited",)
                    )
                return Refuse(RC.QUOTA_EXCEEDED, reason, held.quota, ("rate_limited",))
            self.strikes = 0
        delay = None
        if topic.startswith("$delayed/"):
            seconds, _, real_topic = topic[len("$delayed/") :].partition("/")
            try:
                validate_topic_name(real_topic)
                delay = int(seconds) if seconds.isdigit() else -1
            except MQTTError:
                delay = -1
            if not 0 <= delay <= MAX_DELAY or real_topic.startswith("$"):
                return Refuse(RC.TOPIC_NAME_INVALID, "use $delayed/{seconds}/{topic}")
            topic = real_topic
        if too_deep(topic):
            return Refuse(RC.TOPIC_NAME_INVALID, "topic has too many levels")
        acl = self.auth.acl
        service = None
        if topic[:1] == "$":  # the broker's own topics; of them, clients may only make requests
            service = self.shadows
            if service is None or not service.admits(self.auth, topic):
                return Refuse(RC.NOT_AUTHORIZED, "not authorized", None, ("denied",))
        elif acl is not None and not acl.can_publish(topic):
            return Refuse(RC.NOT_AUTHORIZED, "not authorized", None, ("denied",))
        message = Message.from_publish(
            self.tenant,
            self.client_id,
            topic,
            packet.payload,
            qos,
            packet.retain,
            packet.properties if v5 else {},
            self.device,
            self.origin,
        )
        if service is not None:  # a request, not a message: nothing is retained or routed
            if qos == 1:
                self.recent.slots[packet.packet_id % SLOTS] = (  # type: ignore[operator, assignment]  # QoS 1: it has an id (codec)
                    packet.packet_id,
                    topic,
                    packet.payload,
                )
            return Accept(message, None, service)
        if packet.retain and packet.payload:  # clearing is always allowed
            limit = quota.get("max_retained_messages")
            if (
                limit is not None
                and self.retained.count(self.tenant) >= limit
                and not self.retained.has(self.tenant, topic)
            ):
                return Refuse(RC.QUOTA_EXCEEDED, "retained message limit", "retained")
        if qos == 1:  # remembered to know its resend (resends.RecentPublishes, inline)
            packet_id: int = packet.packet_id  # type: ignore[assignment]  # QoS 1: it has an id (codec)
            self.recent.slots[packet_id % SLOTS] = (packet_id, topic, packet.payload)
        return Accept(message, delay)


@dataclass(slots=True)
class SubscribeDecision:
    """SUBACK's codes (one per filter, in order), the subscriptions granted, and what to count."""

    codes: list[int]
    granted: list[Subscription]
    quota_hits: int = 0  # filters refused by max_subscriptions_per_client
    group_hits: int = 0  # filters refused by max_shared_groups
    denied: int = 0  # filters refused by the ACL


def admit_subscribe(
    packet: Subscribe,
    auth: AuthResult,
    subscriptions: dict[str, SubscriptionState],
    new_group_over: Callable[[str], bool] | None = None,
) -> SubscribeDecision:
    """Each filter of a SUBSCRIBE: too deep or of a form the broker does not serve (`_form_ok`),
    not authorized, over the
    tenant's subscription quota, a shared group one more than the tenant may have
    (`new_group_over(filter)`: `groups.GroupQueues.over_cap`), or granted at the QoS asked
    (`subscriptions`: the session's current ones). Without an ACL everything of the tenant is
    allowed but the things' reserved topics, each thing's its own
    (`common.access.acl.reserved_default`)."""
    acl = auth.acl
    limit = auth.quota.get("max_subscriptions_per_client")
    decision = SubscribeDecision([], [])
    for sub in packet.subscriptions:
        if too_deep(sub.topic_filter) or not _form_ok(sub.topic_filter):
            decision.codes.append(RC.TOPIC_FILTER_INVALID)
            continue
        if (
            not acl.can_subscribe(sub.topic_filter)
            if acl is not None
            else reserved_default(routed_filter(sub.topic_filter)[1].split("/"), auth.device)
            is False
        ):
            decision.denied += 1
            decision.codes.append(RC.NOT_AUTHORIZED)
            continue
        if (
            limit is not None
            and sub.topic_filter not in subscriptions
            and len(subscriptions) >= limit
        ):
            decision.quota_hits += 1
            decision.codes.append(RC.QUOTA_EXCEEDED)
            continue
        if new_group_over is not None and new_group_over(sub.topic_filter):
            decision.group_hits += 1
            decision.codes.append(RC.QUOTA_EXCEEDED)
            continue
        decision.codes.append(sub.qos)
        decision.granted.append(sub)
    return decision


def _form_ok(topic_filter: str) -> bool:
    """A `$replay/{from}/{filter}` that says when and what, not shared; a `$share/{group}/…`
    whose filter is neither replayed nor shared again and whose group name has no control
    character (U+0001 marks the cluster's held routes). Other filters: True."""
    try:
        parse_replay(topic_filter, 0.0)
    except TopicFilterInvalid:
        return False
    if topic_filter.startswith(SHARE_PREFIX):
        group, _, inner = topic_filter[len(SHARE_PREFIX) :].partition("/")
        if inner.startswith((SHARE_PREFIX, REPLAY_PREFIX)) or min(group, default=" ") < " ":
            return False
    return True
