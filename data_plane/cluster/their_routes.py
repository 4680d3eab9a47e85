"""The other nodes' routes: their deltas on the route channel, into this node's `RouteTable`.

Every node publishes its route changes on `Keys.channel` (see `own_routes`); this room listens
and applies them in version order (`RouteTable.apply`). A delta that does not follow the
version this node holds (one was missed), a reset (the node rewrote its whole set) or a node
newly seen makes it load that node's whole set (`load`); the heartbeat (`membership`) also
compares every live node's version with the table's and loads what it missed.

Deltas published while the channel was down are lost, so after any break the table is
reloaded. That includes the break redis-py hides: it reconnects the channel quietly (e.g. after
Redis' output-buffer limit cut a node that read too slowly); a callback on the connection
notices, reloads every other node's set and has this node's own rewritten (`own_routes`).
A node starting a replay asks on this channel for each node's cut (`fences`), after the delta
that routes the replay's filter there. A message from a node also tells the listener that it
lives (`left`: it does not; `replaces`: a survivor took a dead node's place — `inherit` — and
every node switches to it at once).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from redis.exceptions import RedisError

from data_plane.cluster.bus import Bus
from data_plane.cluster.routes import RouteTable

log = logging.getLogger("data_plane.cluster")


class Sightings(Protocol):
    """What the route channel tells of the nodes' liveness (`membership` owns it)."""

    def seen(self, node_id: str) -> None:
        """It wrote, so it lives."""

    def gone(self, node_id: str) -> None:
        """It left, or a survivor took its place (`inherit`)."""


class TheirRoutes:
    """Keeps the route table in step with the other nodes' route sets."""

    def __init__(
        self,
        bus: Bus,
        table: RouteTable,
        sightings: Sightings,
        on_break: Callable[[], None],
        on_fence: Callable[[dict[str, Any]], None],
    ) -> None:
        self.bus = bus
        self.table = table
        self.sightings = sightings
        # The channel broke (deltas lost both ways): our own set is announced anew (`own_routes`).
        self.on_break = on_break
        # A node asks for the others' cuts (its id, the fence's, its route version): `fences`.
        self.on_fence = on_fence
        self.loading: set[str] = set()  # nodes whose set is being loaded now
        self.resubscribed = 0  # times the route channel had to be subscribed again

    async def load(self, node_id: str) -> None:
        """A node's whole route set, with the version it stands at."""
        if node_id in self.loading:
            return
        keys = self.bus.keys
        self.loading.add(node_id)
        try:
            pipe = self.bus.redis.pipeline(transaction=True)
            pipe.get(keys.version(node_id))
            pipe.smembers(keys.routes(node_id))
            version, members = await pipe.execute()
        finally:
            self.loading.discard(node_id)
        if version is None:
            return  # not written yet (or purged): its reset message or the next beat brings it
        self.table.replace(node_id, int(version), {m.decode() for m in members})

    async def catch_up(self, versions: dict[str, int]) -> None:
        """The live nodes' versions (`membership`, each beat): a node new to the table, or
        ahead of it (a delta of it was missed), is loaded."""
        for node_id, version in versions.items():
            known = self.table.nodes.get(node_id)
            if known is None or known.version < version:
                await self.load(node_id)

    def on_message(self, data: bytes) -> None:
        """One message of the route channel."""
        change = json.loads(data)
        node_id = change["node"]
        if node_id == self.bus.node_id:
            return
        if change.get("left"):
            self.sightings.gone(node_id)
            log.info("node %s left", node_id)
            return
        if change.get("replaces"):  # a survivor took a dead node's place: switch at once
            self.sightings.gone(change["replaces"])
        self.sightings.seen(node_id)  # it wrote, so it lives; the beat fills in the rest
        if change.get("fence"):  # after the delta with the replay's route, on this channel
            self.on_fence(change)
            return
        if change.get("reset") or not self.table.apply(
            node_id, change["version"], change.get("added") or [], change.get("removed") or []
        ):
            asyncio.get_running_loop().create_task(self._load_quietly(node_id))

    async def _load_quietly(self, node_id: str) -> None:
        try:
            await self.load(node_id)
        except (RedisError, OSError) as exc:
            log.warning("routes of node %s not loaded (%s): next beat", node_id, exc)

    async def forever(self) -> None:
        """Listen on the route channel for as long as the node runs, subscribing again after
        any break."""
        while True:
            pubsub = self.bus.redis.pubsub()
            channel = None
            try:
                await pubsub.subscribe(self.bus.keys.channel)
                channel = pubsub.connection  # redis-py reconnects it quietly: we want to know
                channel.register_connect_callback(self._channel_reconnected)
                # Deltas sent before this subscription are missed: the beat's version check
                # (right below, and every half heartbeat) loads whatever changed meanwhile.
                for node_id in list(self.table.nodes):
                    await self.load(node_id)
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
                    if message is not None and message["type"] == "message":
                        self.on_message(message["data"])
            except (RedisError, OSError) as exc:
                # E.g. Redis' output-buffer limit cut this (slow) subscriber off: whatever was
                # published meanwhile is reloaded above, and our own set is announced again.
                log.warning("route channel lost (%s): resubscribing", exc)
                self.resubscribed += 1
                self.on_break()
                await asyncio.sleep(min(1.0, self.bus.heartbeat / 2))
            finally:
                if channel is not None:
                    channel.deregister_connect_callback(self._channel_reconnected)
                try:
                    await pubsub.aclose()
                except (RedisError, OSError):
                    pass

    def _channel_reconnected(self, _connection: Any) -> None:
        """redis-py took the route channel up again by itself (Redis restarted, or its
        output-buffer limit cut this node off for reading too slowly): the deltas published
        meanwhile are lost, so every node's set is reloaded and ours announced anew."""
        log.warning("route channel reconnected: reloading the route table")
        self.resubscribed += 1
        self.on_break()  # the beat rewrites our set (the others reload)
        loop = asyncio.get_running_loop()
        for node_id in list(self.table.nodes):
            loop.create_task(self._load_quietly(node_id))
