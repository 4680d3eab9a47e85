"""ACL evaluation: a tenant's ordered allow/deny rules with `${tenant}`/`${client}` placeholders.

Rules apply in order (position, id); the first whose filter matches the topic decides; the
tenant's default decides when none does. PUBLISH is judged on its topic.

SUBSCRIBE has Mosquitto's read semantics: what a subscription may receive is judged message by
message at delivery (live and retained), with the same first-match rule on the message's topic
(`can_receive`). The subscription itself is refused only when no topic it can match could ever
be received: when a deny rule covers it entirely before any allow rule could grant part of it
(or, with a deny default, no allow rule overlaps it). So with a deny on `test/nosubscribe`,
`#` and `+/+` are granted and never carry that topic, while `test/nosubscribe` itself is refused.

A thing's reserved topics (`$aws/things/{thing}/…`, AWS IoT's device shadows) are its device's
own: where no rule names them, the device may use its own and no other's, whatever the tenant's
default (`reserved_default`). A rule grants or denies them only by naming `$aws` itself: a
leading wildcard never matches a `$` topic (MQTT-4.7.2-1), so `allow #` does not hand one device
another's shadow.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.mqtt.topics import filter_covers, filters_intersect, hidden_from_wildcards
from common.mqtt.topics import levels_match as filter_matches
from common.shadow.topics import thing_of

RESERVED = "$aws"  # the first level of the things' reserved topics

PUBLISH = "publish"
SUBSCRIBE = "subscribe"


@dataclass(frozen=True, slots=True)
class AclEntry:
    action: str  # publish | subscribe | both
    allow: bool
    topic: str
    device: str | None = None  # None: tenant-wide


def expand(template: str, tenant: str, client: str) -> str:
    return template.replace("${tenant}", tenant).replace("${client}", client)


def reserved_default(levels: list[str], device: str) -> bool | None:
    """What no rule decides of a thing's reserved topic (or filter), split: allowed for the
    device whose thing it is, refused otherwise (a wildcard in the thing's place is someone
    else's too); None when the levels are not under `$aws`."""
    if levels[0] != RESERVED:
        return None
    return thing_of(levels) == device


def _names_reserved(rule: list[str], levels: list[str]) -> bool:
    """Whether a rule may decide a `$aws` filter: only by naming that level (no wildcard)."""
    return levels[0] != RESERVED or rule[0] == RESERVED


class AclPolicy:
    """The rules that apply to one connected device, placeholders already expanded."""

    __slots__ = (
        "_publish",
        "_subscribe",
        "_default_allow",
        "_device",
        "_cache",
        "_read_cache",
        "filters_reads",
    )

    def __init__(
        self, entries: list[AclEntry], *, tenant: str, device: str, default_allow: bool
    ) -> None:
        mine = [e for e in entries if e.device is None or e.device == device]
        self._publish = [
            (e.allow, expand(e.topic, tenant, device).split("/"))
            for e in mine
            if e.action in (PUBLISH, "both")
        ]
        self._subscribe = [
            (e.allow, expand(e.topic, tenant, device).split("/"))
            for e in mine
            if e.action in (SUBSCRIBE, "both")
        ]
        self._default_allow = default_allow
        self._device = device
        self._cache: dict[str, bool] = {}
        self._read_cache: dict[str, bool] = {}
        # Deliveries need a per-message check only when some topic may be withheld: a deny, a
        # deny default, or a rule granting another thing's reserved topics (a subscription
        # with a wildcard thing must then carry only the things granted).
        self.filters_reads = (
            not default_allow
            or any(not a for a, _ in self._subscribe)
            or any(rule[0] == RESERVED for _, rule in self._subscribe)
        )

    def _default(self, levels: list[str]) -> bool:
        reserved = reserved_default(levels, self._device)
        return self._default_allow if reserved is None else reserved

    def can_publish(self, topic: str) -> bool:
        cached = self._cache.get(topic)
        if cached is not None:
            return cached
        levels = topic.split("/")
        decision = self._default(levels)
        for allow, rule in self._publish:
            if filter_matches(rule, levels):
                decision = allow
                break
        if len(self._cache) < 4096:
            self._cache[topic] = decision
        return decision

    def can_subscribe(self, topic_filter: str) -> bool:
        """Refused only when every topic the filter can match is denied (see module doc).
        `$share/{group}/{filter}` is judged on the filter it shares (and read like it), and
        `$replay/{from}/{filter}` on the filter it replays."""
        if topic_filter.startswith(("$share/", "$replay/")):
            topic_filter = topic_filter.split("/", 2)[2] if topic_filter.count("/") >= 2 else ""
        levels = topic_filter.split("/")
        for allow, rule in self._subscribe:
            if not _names_reserved(rule, levels):
                continue
            if allow and filters_intersect(rule, levels):
                return True
            if not allow and filter_covers(rule, levels):
                return False
        return self._default(levels)

    def can_receive(self, topic: str) -> bool:
        """Whether a message on `topic` may be delivered to this device's subscriptions."""
        cached = self._read_cache.get(topic)
        if cached is not None:
            return cached
        levels = topic.split("/")
        # `$` topics: a rule's leading wildcard counts here (as it did for subscriptions to
        # `$SYS/#` under an allow `#`), since the subscription itself named the `$` level;
        # except for the things' reserved topics, which only a rule naming `$aws` decides.
        reserved = levels[0] == RESERVED
        match = filter_covers if hidden_from_wildcards(topic) and not reserved else filter_matches
        decision = self._default(levels)
        for allow, rule in self._subscribe:
            if match(rule, levels):
                decision = allow
                break
        if len(self._read_cache) < 4096:
            self._read_cache[topic] = decision
        return decision


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    rule: int | None  # index into the entries of the rule that decided; None: the default


def explain(
    entries: list[AclEntry],
    *,
    tenant: str,
    device: str,
    default_allow: bool,
    action: str,
    topic: str,
) -> Verdict:
    """ "May `device` publish to / subscribe to `topic`?" as the broker decides it (`AclPolicy`,
    the same object the broker builds at CONNECT), with the rule that decided, for the portal's
    ACL tester."""
    policy = AclPolicy(entries, tenant=tenant, device=device, default_allow=default_allow)
    if action == PUBLISH:
        allowed = policy.can_publish(topic)
    elif action == SUBSCRIBE:
        allowed = policy.can_subscribe(topic)
    else:
        raise ValueError(f"action must be {PUBLISH!r} or {SUBSCRIBE!r}, not {action!r}")
    levels = (topic.split("/", 2)[2] if topic.startswith("$share/") else topic).split("/")
    for index, entry in enumerate(entries):
        if entry.device is not None and entry.device != device:
            continue
        if entry.action not in (action, "both"):
            continue
        rule = expand(entry.topic, tenant, device).split("/")
        if not _names_reserved(rule, levels):
            continue
        if action == PUBLISH:
            decides = filter_matches(rule, levels)
        else:
            decides = (entry.allow and filters_intersect(rule, levels)) or (
                not entry.allow and filter_covers(rule, levels)
            )
        if decides:
            return Verdict(allowed, index)
    return Verdict(allowed, None)
