"""The wills of a node's connected clients, kept in Redis so a survivor can publish them when
the node dies (MQTT 5 §3.1.2.5, §3.1.3.2.2).

A persistent session kept in Postgres carries its will in its record (the survivor adopts the
session and schedules the will from there: data_plane.cluster.inherit). Every other client
with a will — a clean session (expiry 0), or any session of a node without a database — has
it in `Keys.wills(node)`, a hash (tenant NUL client id) → JSON {"m": the will as the forward
codec's bytes (hex), "delay": its will delay, "expiry": the session expiry interval}, written
when the client connects and deleted when its connection closes (the node itself deals with
the will from then on). Writes go through one queue, the last change of a client winning, so a
quick connect-disconnect never leaves a stale will behind.

When the node dies, the survivor that takes its place publishes each of those wills whose
client id is still owned by the dead node (the client did not reconnect elsewhere) after the
will delay capped by the session expiry — the session ended with the node's memory, so for a
clean session (expiry 0) that is at once — and checks the ownership again when the delay ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from data_plane.cluster import codec
from data_plane.cluster.bus import Bus

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker

log = logging.getLogger("data_plane.cluster")

FLUSH = 0.005  # seconds will changes gather before going to Redis


def _field(tenant: str, client_id: str) -> str:
    return f"{tenant}\x00{client_id}"


class WillRegistry:
    """The wills of this node's clients in Redis, and a dead node's published (see above)."""

    broker: Broker  # `attach`, at the node's start

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.pending: dict[str, str | None] = {}  # field -> record, None: delete
        self.wake = asyncio.Event()
        self.published = 0  # wills of dead nodes' clients published here

    def key(self, node_id: str) -> str:
        return self.bus.keys.wills(node_id)

    def attach(self, broker: Broker) -> None:
        self.broker = broker
        broker.hooks.add("client.connected", self._connected)
        broker.hooks.add("client.disconnected", self._disconnected)

    def _connected(self, conn: Any) -> None:
        will, session = conn.will, conn.session
        field = _field(conn.tenant, conn.client_id)
        if will is None or session is None or session.persist is not None:
            self.pending[field] = None  # none, or kept with the session in Postgres
        else:
            record = {"m": codec.encode(will, codec.DELIVER).hex()}
            record.update(delay=conn.will_delay, expiry=session.expiry_interval)
            self.pending[field] = json.dumps(record)
        self.wake.set()

    def rewrite(self) -> None:
        """Every live client's will again (Redis lost them, or a survivor took them)."""
        for conn in list(self.broker.connections):
            if conn.session is not None and conn.tenant:
                self._connected(conn)

    def _disconnected(self, conn: Any) -> None:
        self.pending[_field(conn.tenant, conn.client_id)] = None
        self.wake.set()

    async def forever(self) -> None:
        while True:
            await self.wake.wait()
            await asyncio.sleep(FLUSH)
            self.wake.clear()
            pending, self.pending = self.pending, {}
            if not pending:
                continue
            key = self.key(self.bus.node_id)
            pipe = self.bus.redis.pipeline(transaction=False)
            for field, record in pending.items():
                if record is None:
                    pipe.hdel(key, field)
                else:
                    pipe.hset(key, field, record)
            try:
                await pipe.execute()
            except (RedisError, OSError) as exc:
                log.warning("wills not recorded in the cluster bus: %s", exc)
                for field, record in pending.items():  # again, unless changed since
                    self.pending.setdefault(field, record)
                await asyncio.sleep(min(1.0, self.bus.heartbeat / 2))
                self.wake.set()

    async def publish_for(self, dead: str) -> int:
        """The wills a dead node's clients left (see the module's docstring); returns how many
        are due (published now or after their delay)."""
        redis = self.bus.redis
        records = await redis.hgetall(self.key(dead))
        due = 0
        for field, raw in records.items():
            tenant, client_id = field.decode().split("\x00", 1)
            if not await self._still_of(dead, tenant, client_id):
                continue  # reconnected elsewhere: its new connection dealt with the will
            record = json.loads(raw)
            (_flags, will, _groups), *_ = codec.decode(bytes.fromhex(record["m"]))
            delay = max(0, min(int(record["delay"]), int(record["expiry"])))
            due += 1
            if delay == 0:
                self._publish(will)
            else:
                asyncio.get_running_loop().call_later(
                    delay,
                    lambda w=will, t=tenant, c=client_id: self._later(dead, t, c, w),  # type: ignore[misc]  # (defaults bind the loop's values)
                )
        await redis.delete(self.key(dead))
        return due

    def _later(self, dead: str, tenant: str, client_id: str, will: Any) -> None:
        async def check() -> None:
            try:
                if await self._still_of(dead, tenant, client_id):
                    self._publish(will)
            except (RedisError, OSError) as exc:
                log.warning("will of %s/%s not published: %s", tenant, client_id, exc)

        asyncio.get_running_loop().create_task(check())

    async def _still_of(self, dead: str, tenant: str, client_id: str) -> bool:
        owner = await self.bus.redis.get(self.bus.keys.owner(tenant, client_id))
        return owner is None or owner.decode() == dead

    def _publish(self, will: Any) -> None:
        self.published += 1
        self.broker.publish_will(None, will)
