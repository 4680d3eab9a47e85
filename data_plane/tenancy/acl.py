"""ACL evaluation: a tenant's ordered allow/deny rules with `${tenant}`/`${client}` placeholders.

Rules apply in order (position, id); the first that applies decides; the tenant's default decides
when none does. For PUBLISH a rule applies when its filter matches the topic. For SUBSCRIBE an
allow rule applies only when its filter covers every topic the requested filter can match, while a
deny rule applies as soon as the two filters can match a common topic: a subscription is never
allowed to receive what a deny rule forbids.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def filter_matches(filter_levels: list[str], topic_levels: list[str]) -> bool:
    """Topic-name match (MQTT wildcards in the filter); `$` topics need a literal first level."""
    if topic_levels and topic_levels[0].startswith("$") and filter_levels[0] in ("+", "#"):
        return False
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True
        if index >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[index]:
            return False
    return len(filter_levels) == len(topic_levels)


def filter_covers(outer: list[str], inner: list[str]) -> bool:
    """True when every topic matched by `inner` is matched by `outer`."""
    for index, level in enumerate(outer):
        if level == "#":
            return True
        if index >= len(inner):
            return False
        if inner[index] == "#":
            return False
        if level == "+":
            continue
        if inner[index] == "+" or inner[index] != level:
            return False
    return len(outer) == len(inner)


def filters_intersect(a: list[str], b: list[str]) -> bool:
    """True when some topic is matched by both filters."""
    for index in range(max(len(a), len(b))):
        left = a[index] if index < len(a) else None
        right = b[index] if index < len(b) else None
        if left == "#" or right == "#":
            return True
        if left is None or right is None:
            return False
        if left != "+" and right != "+" and left != right:
            return False
    return True


class AclPolicy:
    """The rules that apply to one connected device, placeholders already expanded."""

    __slots__ = ("_publish", "_subscribe", "_default_allow", "_cache")

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
        self._cache: dict[str, bool] = {}

    def can_publish(self, topic: str) -> bool:
        cached = self._cache.get(topic)
        if cached is not None:
            return cached
        levels = topic.split("/")
        decision = self._default_allow
        for allow, rule in self._publish:
            if filter_matches(rule, levels):
                decision = allow
                break
        if len(self._cache) < 4096:
            self._cache[topic] = decision
        return decision

    def can_subscribe(self, topic_filter: str) -> bool:
        levels = topic_filter.split("/")
        for allow, rule in self._subscribe:
            if allow and filter_covers(rule, levels):
                return True
            if not allow and filters_intersect(rule, levels):
                return False
        return self._default_allow
