"""Per-tenant subscription routing: a topic trie with `+`/`#`, shared groups, and a match cache.

Every tenant has its own `TenantRouter`; nothing another tenant subscribes to is in its trie, so
no filter — `#` included — can ever match another tenant's message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common.mqtt.topics import hidden_from_wildcards

CACHE_LIMIT = 10_000
# A group only its holder keeps (no member here) is announced to the cluster under its name with
# this prefix, so that other nodes give it messages only when no node has a member
# (data_plane.cluster.publish). (MQTT discourages control characters in names.)
HELD = "\x01"


@dataclass(slots=True)
class Subscriber:
    """One subscription of one session: its options as SUBSCRIBE gave them."""

    session: Any  # data_plane.broker.session.Session
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    subscription_id: int | None = None


@dataclass(slots=True)
class SharedGroup:
    name: str
    members: list[Subscriber] = field(default_factory=list)
    cursor: int = 0
    topic_filter: str = ""  # the filter it shares: (filter, name) is the group's identity
    # Keeps the group's messages while it has no member (data_plane.broker.groups.Holder):
    # the group stays in the router without members while it has one.
    holder: Any = None

    def pick(self, kept: bool = False) -> Subscriber | None:
        """Round robin over members, preferring connected ones (an offline member's persistent
        session keeps what it is given). None without members, and while the holder keeps
        messages or awaits what another node kept: a newcomer waits behind them (publish
        order). `kept`: a message another node kept, handed over — it goes past that wait."""
        holder = self.holder
        if holder is not None and (holder.session.queue or holder.awaiting):
            if not (kept and holder.awaiting):
                return None
        count = len(self.members)
        if not count:
            return None
        for step in range(count):
            member = self.members[(self.cursor + step) % count]
            if member.session.connected:
                self.cursor = (self.cursor + step + 1) % count
                return member
        member = self.members[self.cursor % count]
        self.cursor = (self.cursor + 1) % count
        return member


class _Node:
    __slots__ = ("children", "subscribers", "groups")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.subscribers: dict[int, Subscriber] = {}  # id(session) -> subscription
        self.groups: dict[str, SharedGroup] = {}

    def empty(self) -> bool:
        return not (self.children or self.subscribers or self.groups)


class TenantRouter:
    __slots__ = ("root", "_cache", "count", "on_route")

    def __init__(self, on_route: Callable[[str, str | None, bool], None] | None = None) -> None:
        self.root = _Node()
        self._cache: dict[str, tuple[list[Subscriber], list[SharedGroup]]] = {}
        self.count = 0
        # callable(filter, group, added) when a filter (or a shared group on it) gets its first
        # subscriber or loses its last: the cluster's route table follows it (data_plane.cluster).
        self.on_route = on_route

    def subscribe(self, topic_filter: str, subscriber: Subscriber, group: str | None) -> bool:
        """Add or replace; returns True when the session had no such subscription before."""
        node = self.root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        self._cache.clear()
        key = id(subscriber.session)
        if group is None:
            new = key not in node.subscribers
            if not node.subscribers and self.on_route is not None:
                self.on_route(topic_filter, None, True)
            node.subscribers[key] = subscriber
        else:
            shared = node.groups.get(group)
            if shared is None:
                shared = node.groups[group] = SharedGroup(group, topic_filter=topic_filter)
            before = _state(shared)
            existing = [i for i, m in enumerate(shared.members) if m.session is subscriber.session]
            new = not existing
            if existing:
                shared.members[existing[0]] = subscriber
            else:
                shared.members.append(subscriber)
            self._moved(topic_filter, group, before, _state(shared))
        if new:
            self.count += 1
        return new

    def unsubscribe(self, topic_filter: str, session: Any, group: str | None) -> bool:
        path = [self.root]
        levels = topic_filter.split("/")
        for level in levels:
            child = path[-1].children.get(level)
            if child is None:
                return False
            path.append(child)
        node = path[-1]
        removed = False
        if group is None:
            removed = node.subscribers.pop(id(session), None) is not None
            if removed and not node.subscribers and self.on_route is not None:
                self.on_route(topic_filter, None, False)
        else:
            shared = node.groups.get(group)
            if shared:
                count, before = len(shared.members), _state(shared)
                shared.members = [m for m in shared.members if m.session is not session]
                removed = len(shared.members) != count
                self._moved(topic_filter, group, before, _state(shared))
                if _state(shared) is None:
                    del node.groups[group]
        if removed:
            self.count -= 1
            self._cache.clear()
            self._prune(path, levels)
        return removed

    def group(self, topic_filter: str, name: str) -> SharedGroup | None:
        node = self.root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                return None
            node = child
        return node.groups.get(name)

    def hold(self, topic_filter: str, name: str, holder: Any) -> SharedGroup:
        """Give the group (made if it is not here yet) its holder: it stays without members."""
        shared = self.group(topic_filter, name)
        if shared is None:
            node = self.root
            for level in topic_filter.split("/"):
                node = node.children.setdefault(level, _Node())
            shared = node.groups[name] = SharedGroup(name, topic_filter=topic_filter)
            self._cache.clear()
        before = _state(shared)
        shared.holder = holder
        self._moved(topic_filter, name, before, _state(shared))
        return shared

    def unhold(self, topic_filter: str, name: str) -> None:
        """The group's holder is gone: without members, so is the group."""
        path = [self.root]
        levels = topic_filter.split("/")
        for level in levels:
            child = path[-1].children.get(level)
            if child is None:
                return
            path.append(child)
        shared = path[-1].groups.get(name)
        if shared is None:
            return
        before = _state(shared)
        shared.holder = None
        self._moved(topic_filter, name, before, _state(shared))
        if not shared.members:
            del path[-1].groups[name]
            self._cache.clear()
            self._prune(path, levels)

    def _moved(self, topic_filter: str, name: str, before: str | None, after: str | None) -> None:
        """Tell the cluster a group's route changed: it came, went, or went from kept by its
        holder only (`HELD`) to having members here, or back."""
        if before == after or self.on_route is None:
            return
        if before is not None:
            self.on_route(topic_filter, _route_name(name, before), False)
        if after is not None:
            self.on_route(topic_filter, _route_name(name, after), True)

    @staticmethod
    def _prune(path: list[_Node], levels: list[str]) -> None:
        for depth in range(len(levels), 0, -1):  # empty branches go
            if path[depth].empty():
                del path[depth - 1].children[levels[depth - 1]]
            else:
                break

    def routes(self) -> list[tuple[str, str | None]]:
        """Every (filter, group) with at least one subscriber: what the cluster's route table
        holds for this tenant on this node (group None: plain subscriptions)."""
        out: list[tuple[str, str | None]] = []
        stack: list[tuple[_Node, str]] = [(self.root, "")]
        while stack:
            node, path = stack.pop()
            if node.subscribers:
                out.append((path, None))
            out.extend(
                (path, _route_name(name, state))
                for name, group in node.groups.items()
                if (state := _state(group)) is not None
            )
            for level, child in node.children.items():
                stack.append((child, level if node is self.root else f"{path}/{level}"))
        return out

    def match(self, topic: str) -> tuple[list[Subscriber], list[SharedGroup]]:
        cached = self._cache.get(topic)
        if cached is not None:
            return cached
        subscribers: list[Subscriber] = []
        groups: list[SharedGroup] = []
        levels = topic.split("/")
        self._walk(self.root, levels, 0, subscribers, groups, hidden_from_wildcards(topic))
        result = (subscribers, groups)
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[topic] = result
        return result

    def _walk(
        self,
        node: _Node,
        levels: list[str],
        depth: int,
        subscribers: list[Subscriber],
        groups: list[SharedGroup],
        dollar: bool,
    ) -> None:
        # `dollar`: the topic is hidden from a leading wildcard (MQTT-4.7.2-1).
        wildcard_ok = not (dollar and depth == 0)
        if wildcard_ok:
            hash_node = node.children.get("#")
            if hash_node is not None:
                subscribers.extend(hash_node.subscribers.values())
                groups.extend(hash_node.groups.values())
        if depth == len(levels):
            subscribers.extend(node.subscribers.values())
            groups.extend(node.groups.values())
            return
        child = node.children.get(levels[depth])
        if child is not None:
            self._walk(child, levels, depth + 1, subscribers, groups, dollar)
        if wildcard_ok:
            plus = node.children.get("+")
            if plus is not None:
                self._walk(plus, levels, depth + 1, subscribers, groups, dollar)


def _state(group: SharedGroup) -> str | None:
    """What a group's route says: it has members here, only its holder keeps it, or nothing."""
    if group.members:
        return "members"
    return "held" if group.holder is not None else None


def _route_name(name: str, state: str) -> str:
    return name if state == "members" else HELD + name


class Router:
    """All tenants' routers; a tenant's router exists while it has subscriptions."""

    def __init__(
        self, on_route: Callable[[str, str, str | None, bool], None] | None = None
    ) -> None:
        self.tenants: dict[str, TenantRouter] = {}
        # callable(tenant, filter, group, added): see TenantRouter.on_route (the cluster's).
        self.on_route = on_route

    def for_tenant(self, tenant: str) -> TenantRouter:
        router = self.tenants.get(tenant)
        if router is None:
            on_route = None
            if self.on_route is not None:
                on_route = functools.partial(self.on_route, tenant)
            router = self.tenants[tenant] = TenantRouter(on_route)
        return router

    def match(self, tenant: str, topic: str) -> tuple[list[Subscriber], list[SharedGroup]]:
        router = self.tenants.get(tenant)
        if router is None:
            return [], []
        return router.match(topic)
