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
A message from a node also tells the listener that it lives (`left`: it does not; `replaces`:
a survivor took a dead node's place — `inherit` — and every node switches to it at once).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from redis.exceptions import RedisError

log = logging.getLogger("data_plane.cluster")


class TheirRoutes:
    """Keeps the route table (`Cluster.table`) in step with the other nodes' route sets."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.loading: set[str] = set()  # nodes whose set is being loaded now
        self.resubscribed = 0  # times the route channel had to be subscribed again

    async def load(self, node_id: str) -> None:
        """A node's whole route set, with the version it stands at."""
        if node_id in self.loading:
            return
        cluster = self.cluster
        self.loading.add(node_id)
        try:
            pipe = cluster.redis.pipeline(transaction=True)
            pipe.get(cluster.keys.version(node_id))
            pipe.smembers(cluster.keys.routes(node_id))
            version, members = await pipe.execute()
        finally:
            self.loading.discard(node_id)
        if version is None:
            return  # not written yet (or purged): its reset message or the next beat brings it
        cluster.table.replace(node_id, int(version), {m.decode() for m in members})

    def on_message(self, data: bytes) -> None:
        """One message of the route channel."""
        cluster = self.cluster
        change = json.loads(data)
        node_id = change["node"]
        if node_id == cluster.node_id:
            return
        if change.get("left"):
            cluster.membership.gone(node_id)
            log.info("node %s left", node_id)
            return
        if change.get("replaces"):  # a survivor took a dead node's place: switch at once
            cluster.membership.gone(change["replaces"])
        if node_id not in cluster.alive:  # it wrote, so it lives; the beat fills in the rest
            cluster.alive[node_id] = {"node": node_id}
        if change.get("reset") or not cluster.table.apply(
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
        cluster = self.cluster
        while True:
            pubsub = cluster.redis.pubsub()
            channel = None
            try:
                await pubsub.subscribe(cluster.keys.channel)
                channel = pubsub.connection  # redis-py reconnects it quietly: we want to know
                channel.register_connect_callback(self._channel_reconnected)
                # Deltas sent before this subscription are missed: the beat's version check
                # (right below, and every half heartbeat) loads whatever changed meanwhile.
                for node_id in list(cluster.table.nodes):
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
                cluster.own_routes.synced = False
                await asyncio.sleep(min(1.0, cluster.heartbeat / 2))
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
        self.cluster.own_routes.synced = False  # the beat rewrites our set (the others reload)
        loop = asyncio.get_running_loop()
        for node_id in list(self.cluster.table.nodes):
            loop.create_task(self._load_quietly(node_id))
