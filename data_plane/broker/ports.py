"""The broker's ports: what each side of the broker core may ask of the other, as protocols.

The broker and the session never import the connection: they talk to whatever stands for a
client through these narrow interfaces (the connection satisfies both; tests may pass fakes).

- `Outlet`: what a session needs of its client to deliver: what the client negotiated (version,
  Receive Maximum, Maximum Packet Size, topic aliases), whether it can take more now, and `send`.
- `Client`: what the broker sees of a live connection: who it is, its session, and the three
  things the broker may do to it (take it over, disconnect it, re-apply its tenant's policy).
- `Cluster`: the other broker processes (data_plane.cluster), given to `Broker(...)`: it routes
  each publish here (`Broker.route`) and once to each other node with a matching route, picks
  one node per shared group, and delivers what other nodes forward through `Broker.route`; it
  follows the broker's subscriptions through `Router.on_route`.
"""

from __future__ import annotations

from typing import Any, Protocol


class Outlet(Protocol):
    protocol_version: int
    client_receive_maximum: int
    client_maximum_packet_size: int
    closing: bool
    write_paused: bool
    outbound_bucket: Any  # the tenant's outbound bytes/s bucket, or None
    session: Any

    @property
    def batch_full(self) -> bool: ...

    def send(self, data: bytes) -> None: ...

    def pace(self, wait: float) -> None: ...

    def outbound_alias(self, topic: str) -> tuple[int, bool] | None: ...

    def throttle_by(self, session: Any) -> None: ...

    def unthrottle_by(self, session: Any) -> None: ...


class Client(Outlet, Protocol):
    tenant: str
    device: str
    client_id: str
    auth: Any  # the AuthResult it connected with

    def taken_over(self) -> None: ...

    def disconnect(self, reason_code: int, reason: str = "", *, reference: str = "") -> None: ...

    def apply_policy(self, policy: Any) -> None: ...


class Cluster(Protocol):
    def publish(self, message: Any) -> Any:
        """Route `message` (counted, filtered and retained already) here and to every other
        node with a matching route; the `Published` of both (the bus's commit included)."""
        ...

    def members(self) -> list[dict[str, Any]]:
        """The live nodes, this one included (for `$SYS/broker/nodes`)."""
        ...

    async def claim(self, tenant: str, client_id: str, clean_start: bool) -> None:
        """Before a CONNECT opens its session: the client id is this node's from now on; any
        other node holding its session lets it go (its connection gets 0x8E) first."""
        ...
