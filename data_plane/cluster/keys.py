"""Where a cluster keeps things in Redis: every key and channel name, in one place.

One cluster (`--cluster-name`) is one prefix, `mqtt-cluster:{name}`, so several clusters can
share a Redis without seeing each other. The other rooms build their own keys under
`Keys.prefix` (`limits`' counts and buckets); the keys here are the node's own: its membership,
its route set and version, its forward stream, what a survivor leaves behind when it takes a
dead node's place, the owners of client ids (`sessions`) and the wills of a node's clients
(`wills`).
"""

from __future__ import annotations


class Keys:
    """Where the cluster named `name` keeps things in Redis."""

    def __init__(self, name: str) -> None:
        self.prefix = f"mqtt-cluster:{name}"
        self.members = f"{self.prefix}:members"  # a set of node ids (see `membership`)
        self.channel = f"{self.prefix}:routes"  # route deltas (see `own_routes`, `their_routes`)

    def node(self, node_id: str) -> str:
        """The node's description (JSON), with a TTL its heartbeat renews."""
        return f"{self.prefix}:node:{node_id}"

    def routes(self, node_id: str) -> str:
        """The node's route set (`routes.route_key` members)."""
        return f"{self.prefix}:routes:{node_id}"

    def version(self, node_id: str) -> str:
        """The version of the node's route set: only grows."""
        return f"{self.prefix}:version:{node_id}"

    def stream(self, node_id: str) -> str:
        """What other nodes forward to the node (see `forward`, `receive`)."""
        return f"{self.prefix}:stream:{node_id}"

    def purge(self, node_id: str) -> str:
        """The lock the survivor that takes a dead node's place holds (see `inherit`)."""
        return f"{self.prefix}:purge:{node_id}"

    def dead(self, node_id: str) -> str:
        """Left by the survivor that took a dead node's place (see `inherit`)."""
        return f"{self.prefix}:dead:{node_id}"

    def owner(self, tenant: str, client_id: str) -> str:
        """Which node owns a client id's session (see `sessions`)."""
        return f"{self.prefix}:owner:{tenant}:{client_id}"

    def fence(self, fence_id: str) -> str:
        """The other nodes' answers to a replay's fence, a hash by node id (see `fences`)."""
        return f"{self.prefix}:fence:{fence_id}"

    def wills(self, node_id: str) -> str:
        """The wills of a node's clients not kept in Postgres, a hash (see `wills`)."""
        return f"{self.prefix}:wills:{node_id}"
