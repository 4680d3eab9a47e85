"""The route table: (tenant, filter) → nodes, as this node knows the other nodes' routes.

A route is a filter (or a shared group on a filter) with at least one subscriber on a node. In
Redis each node owns one set of its routes (`Keys.routes(node)`) and a version that grows with
every change; this module is the local replica of everybody else's sets, kept in the broker's
own topic trie (`TenantRouter`) with one `RemoteNode` standing for each node, so a publish finds
its nodes with the same `+`/`#`/`$` rules and match cache as it finds its local subscribers.

The replica is merged EMQX's way: a node's routes are only ever written by that node (never by
a peer, except to purge a dead one), so the table is the union of what every live node says it
has. A change arrives as a delta with the owner's next version; a delta that skips a version
(lost while the bus was down) or follows a reset makes the reader load that node's whole set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from data_plane.broker.router import Subscriber, TenantRouter

SEPARATOR = "\x00"  # never in a tenant slug nor in a topic filter (MQTT forbids U+0000)


def route_key(tenant: str, topic_filter: str, group: str | None) -> str:
    """The member of a node's route set for one route."""
    if group is None:
        return f"{tenant}{SEPARATOR}{topic_filter}"
    return f"{tenant}{SEPARATOR}{topic_filter}{SEPARATOR}{group}"


def parse_route(key: str) -> tuple[str, str, str | None]:
    parts = key.split(SEPARATOR)
    if len(parts) == 2:
        return parts[0], parts[1], None
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise ValueError(f"not a route: {key!r}")


@dataclass(eq=False)
class RemoteNode:
    """Another node, as a subscriber of the replica's trie (hashed by identity)."""

    node_id: str
    version: int = 0
    routes: set[str] = field(default_factory=set)
    connected: bool = True  # SharedGroup.pick prefers connected members

    @property
    def client_id(self) -> str:  # the trie's no-local check reads it; never a publisher's id
        return ""


# A Lua function both route scripts start with (own_routes.APPLY_ROUTES, inherit.REPLACE):
# applies the "+key" / "-key" ops from ARGV[first] on to the node's route set, returns
# (added, removed).
APPLY_OPS_LUA = """
local function apply_ops(set, first)
  local added, removed = {}, {}
  for i = first, #ARGV do
    local op, key = string.sub(ARGV[i], 1, 1), string.sub(ARGV[i], 2)
    if op == '+' then
      redis.call('SADD', set, key); added[#added + 1] = key
    else
      redis.call('SREM', set, key); removed[#removed + 1] = key
    end
  end
  return added, removed
end
"""


class RouteTable:
    def __init__(self) -> None:
        self.nodes: dict[str, RemoteNode] = {}
        self.tenants: dict[str, TenantRouter] = {}

    def __len__(self) -> int:
        return sum(len(node.routes) for node in self.nodes.values())

    def _add(self, node: RemoteNode, key: str) -> None:
        if key in node.routes:
            return
        tenant, topic_filter, group = parse_route(key)
        router = self.tenants.get(tenant)
        if router is None:
            router = self.tenants[tenant] = TenantRouter()
        router.subscribe(topic_filter, Subscriber(node, 0), group)
        node.routes.add(key)

    def _remove(self, node: RemoteNode, key: str) -> None:
        if key not in node.routes:
            return
        node.routes.discard(key)
        tenant, topic_filter, group = parse_route(key)
        router = self.tenants.get(tenant)
        if router is not None:
            router.unsubscribe(topic_filter, node, group)
            if not router.count:
                del self.tenants[tenant]

    def replace(self, node_id: str, version: int, routes: set[str]) -> None:
        """A node's whole set as read from Redis at `version`."""
        node = self.nodes.get(node_id)
        if node is None:
            node = self.nodes[node_id] = RemoteNode(node_id)
        for key in node.routes - routes:
            self._remove(node, key)
        for key in routes - node.routes:
            self._add(node, key)
        node.version = version

    def apply(self, node_id: str, version: int, added: list[str], removed: list[str]) -> bool:
        """A delta; False when it cannot be applied in order (the caller loads the set)."""
        node = self.nodes.get(node_id)
        if node is None:
            return False
        if version <= node.version:
            return True  # already in what we loaded
        if version != node.version + 1:
            return False
        for key in removed:
            self._remove(node, key)
        for key in added:
            self._add(node, key)
        node.version = version
        return True

    def drop(self, node_id: str) -> None:
        """A dead or departed node: none of its routes stand."""
        node = self.nodes.pop(node_id, None)
        if node is None:
            return
        for key in list(node.routes):
            self._remove(node, key)

    def match(
        self, tenant: str, topic: str
    ) -> tuple[list[RemoteNode], list[tuple[tuple[str, str], list[RemoteNode]]]]:
        """The nodes with a plain route matching `topic`, and each matching shared group
        ((filter, group), the nodes with members of it)."""
        router = self.tenants.get(tenant)
        if router is None:
            return [], []
        subscribers, groups = router.match(topic)
        plain = [sub.session for sub in subscribers]
        if not groups:
            return plain, []
        return plain, [
            ((group.topic_filter, group.name), [member.session for member in group.members])
            for group in groups
        ]
