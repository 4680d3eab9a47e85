"""No message lost while a persistent session moves between nodes.

Between the old node letting a session go and the other nodes learning the new node's routes
for it, publishers still route its messages to the old node — where the session no longer is.
So the old node leaves a `Relay` in its router in the session's place (plain subscriptions,
same options): whatever reaches the relay is forwarded, marked for that one client id
(`codec.TARGET`), to the new node, and the publisher's PUBACK waits for the bus to hold it,
as for any forward. The relay keeps the old node's routes standing until the new node's routes
for the session are in the old node's table; only then does it leave (its route removals
follow on the same channel, so every node learns the new routes before the old ones go: no
moment without a route). `RELAY_MAX` bounds its life if the new node never announces them.
What other nodes sent here before they knew, and what this node reads late, still goes on
after it left (data_plane.cluster.departed).

The new node delivers a targeted message to that session only; one that arrives while the
session is still being restored waits for it (`SessionClaims.held`).

A message a publisher sent in the short overlap (its node already knew the new route and not
yet that the old one went) reaches the new node twice, directly and relayed: the relay keeps the
message's origin, and the new node delivers it once (data_plane.cluster.exactly).
Shared subscriptions are not relayed (a group's message goes to another member or is lost in
that moment).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from common.mqtt.topics import parse_shared
from data_plane.broker.ports import Commit
from data_plane.broker.router import Subscriber
from data_plane.broker.session import Delivery, Session
from data_plane.cluster import codec
from data_plane.cluster.bus import Peers
from data_plane.cluster.departed import Departed
from data_plane.cluster.forward import Forwarder
from data_plane.cluster.routes import RouteTable, route_key

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker

log = logging.getLogger("data_plane.cluster")

RELAY_STEP = 0.01  # seconds between looks for the new node's routes
RELAY_MAX = 5.0  # seconds a relay stands at most


class Relays:
    """What this node's relays share: the forwarder they send with, the route table and the
    peers they watch for the new node's routes, the router they stand in, and the departed
    relays they become (`departed`)."""

    broker: Broker  # `attach`, at the node's start

    def __init__(
        self, forwarder: Forwarder, table: RouteTable, peers: Peers, departed: Departed
    ) -> None:
        self.forwarder = forwarder
        self.table = table
        self.peers = peers
        self.departed = departed
        self.relayed = 0  # messages relays here sent on to the node a session moved to

    def attach(self, broker: Broker) -> None:
        self.broker = broker

    def stand_in(self, session: Session, node: str) -> Relay:
        """A relay to `node` in the router in `session`'s place (see the module's docstring)."""
        relay = Relay(self, session.tenant, session.client_id, node)
        relay.stand_in(session)
        return relay


class Relay:
    """Session-shaped (what the broker's router and `Broker.route` touch of a session)."""

    queue = ()  # never backs up: the bus's own back-pressure applies

    def __init__(self, relays: Relays, tenant: str, client_id: str, node: str) -> None:
        self.relays = relays
        self.tenant, self.client_id, self.node = tenant, client_id, node
        self.target = (tenant, client_id)
        self.key = None  # not a session: `deliver_to` never takes it for one
        self.relayed = 0
        self.filters: list[tuple[str, Subscriber]] = []

    def deliver(self, delivery: Delivery) -> Commit | None:
        self.relayed += 1
        message = delivery.message
        node, seq = message.cluster_origin or ("", 0)  # (data_plane.cluster.exactly)
        data = codec.encode(message, codec.TARGET, ((self.client_id, node),), seq=seq)
        return self.relays.forwarder.add(
            self.node, data, message.tenant, message.qos, message.qos > 0
        )

    def backs_up(self, _delivery: Delivery) -> bool:
        return False

    # -- life -----------------------------------------------------------------------------

    def stand_in(self, session: Session) -> None:
        """Take the session's plain subscriptions here before it leaves the router."""
        router = self.relays.broker.router.for_tenant(self.tenant)
        for state in session.subscriptions.values():
            group, topic_filter = parse_shared(state.topic_filter)
            if group is not None:
                continue
            sub = Subscriber(
                self, state.qos, state.no_local, state.retain_as_published, state.subscription_id
            )
            router.subscribe(topic_filter, sub, None)
            self.filters.append((topic_filter, sub))
        if self.filters:
            loop = asyncio.get_running_loop()
            loop.call_later(RELAY_STEP, self._check, loop.time() + RELAY_MAX)

    def _check(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        relays = self.relays
        node = relays.table.nodes.get(self.node)
        routes = node.routes if node is not None else ()
        announced = all(route_key(self.tenant, f, None) in routes for f, _ in self.filters)
        if not announced and loop.time() < deadline and self.node in relays.peers.alive:
            loop.call_later(RELAY_STEP, self._check, deadline)
            return
        router = relays.broker.router.for_tenant(self.tenant)
        for topic_filter, _sub in self.filters:
            router.unsubscribe(topic_filter, self, None)
        if announced:  # for what other nodes sent here before they knew (departed.py)
            relays.departed.add(self)
        else:
            log.warning("relay of %s/%s to %s ended unannounced", *self.target, self.node)
        relays.relayed += self.relayed
