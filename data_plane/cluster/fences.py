"""Replay fences: where each node's messages switch from history to live for a replay started
at another node (issue 45; the replay itself: data_plane.broker.replay).

On one node a replay's cut is one step of its loop: what was routed before is in the archive,
what is routed after is delivered live. Across nodes that step is not enough: another node
forwards a message only once it knows the replay's route (its delta is on its way for a few
milliseconds), and its archive segments reach the store on their own schedule. So the node
starting a replay (`fence`) waits until Redis has the delta that routes its filter, then asks
every live node on the route channel for a cut of its own (`answer`):

- the node waits until its route table holds the asking node's routes at that version (a
  missed delta is loaded), then in one step of its loop takes the next millisecond of its
  clock (`replay.cut`) and its count of publishes (`exactly.Origins.count`): every message it
  routed before has an archive time before that millisecond and an origin count at most that
  count, every message after reaches the replay's node live;
- it waits until what it forwarded before its cut is on the bus (`Forwarder.flushed`: ahead,
  in every node's stream, of anything the asker sends there after the answers) and, for a
  replay, until its archive holds everything routed before its cut (`History.written`), and
  answers with the cut, the count and its archive writer's id, in a hash under the fence's id.

The replay then reads each writer's rows up to that writer's cut and drops a live copy whose
origin count is at most its node's count (`replay.Overlap`). A node that does not answer within
`FENCE_WAIT` switches at the replay's own cut (logged). A shared group's hand-over asks the same
without the archive (`handover`): once answered, no node sends the group to its old holder.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from data_plane.broker.ports import Fence
from data_plane.broker.replay import cut
from data_plane.cluster.bus import Bus, Peers
from data_plane.cluster.exactly import Origins
from data_plane.cluster.forward import Forwarder
from data_plane.cluster.own_routes import OwnRoutes
from data_plane.cluster.routes import RouteTable

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker
    from data_plane.broker.ports import History

log = logging.getLogger("data_plane.cluster")

FENCE_WAIT = 5.0  # seconds a replay waits for the other nodes' cuts
ASK_EVERY = 0.01  # seconds between looks at the answers
ANSWER_TTL = 60  # seconds the answers stay in Redis
LOAD_AFTER = 0.05  # seconds a node waits for a delta before it loads the asker's routes


class Fences:
    """Both sides of a replay's fence: asking the others (`fence`) and answering (`asked`)."""

    def __init__(
        self,
        bus: Bus,
        table: RouteTable,
        own_routes: OwnRoutes,
        origins: Origins,
        peers: Peers,
        forwarder: Forwarder,
        load: Callable[[str], Awaitable[None]],
    ) -> None:
        self.bus = bus
        self.table = table
        self.own_routes = own_routes
        self.origins = origins
        self.peers = peers
        self.forwarder = forwarder
        self.load = load  # a node's whole route set (`their_routes`), when a delta was missed
        self.history: History | None = None  # this node's archive (`attach`); None: none
        self.answering: set[asyncio.Task[None]] = set()

    def attach(self, broker: Broker) -> None:
        self.history = broker.replays.history

    async def fence(self, archive: bool = True) -> Fence:
        """The other live nodes' cuts, once they know every route of ours so far (`archive`:
        and their archives hold what they routed before, for a replay)."""
        others = set(self.peers.alive)
        if not others:
            return Fence()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FENCE_WAIT
        answers: dict[str, dict[str, Any]] = {}
        try:
            version = await self.own_routes.flushed(FENCE_WAIT)
            if version is not None:
                fence_id = uuid.uuid4().hex
                ask = {"node": self.bus.node_id, "fence": fence_id, "version": version}
                ask["archive"] = int(archive)
                await self.bus.redis.publish(self.bus.keys.channel, json.dumps(ask))
                key = self.bus.keys.fence(fence_id)
                while True:
                    raw = await self.bus.redis.hgetall(key)
                    answers = {k.decode(): json.loads(v) for k, v in raw.items()}
                    if others <= answers.keys() or loop.time() > deadline:
                        break
                    await asyncio.sleep(ASK_EVERY)
        except (RedisError, OSError) as exc:
            log.warning("replay fence not asked (%s): the others switch at this node's cut", exc)
        missing = tuple(sorted(others - answers.keys()))
        ends = {str(a["writer"]): int(a["end"]) for a in answers.values() if a.get("writer")}
        counts = {node: int(a["count"]) for node, a in answers.items()}
        return Fence(ends, counts, missing)

    def asked(self, change: dict[str, Any]) -> None:
        """The route channel's ask from a node (`their_routes`): answered in a task."""
        node_id, fence_id, version = change["node"], change["fence"], int(change["version"])
        answer = self.answer(node_id, fence_id, version, bool(change.get("archive", 1)))
        task = asyncio.get_running_loop().create_task(answer)
        self.answering.add(task)
        task.add_done_callback(self.answering.discard)

    async def answer(self, node_id: str, fence_id: str, version: int, archive: bool) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FENCE_WAIT
        load_at = loop.time() + LOAD_AFTER
        try:
            while (node := self.table.nodes.get(node_id)) is None or node.version < version:
                if loop.time() > deadline:
                    log.warning("replay fence of %s: its routes v%d not here", node_id, version)
                    return
                if loop.time() > load_at:  # its delta was missed: read its whole set
                    await self.load(node_id)
                    load_at = loop.time() + LOAD_AFTER
                await asyncio.sleep(0.002)
            end = cut()  # one step with the count: routed before <=> before `end`, <= `count`
            count = self.origins.count
            await self.forwarder.flushed()  # (ahead of what the asker sends after the answers)
            writer = None
            if archive and self.history is not None:
                await self.history.written()  # what was routed before the cut is readable
                writer = self.history.writer
            answer = json.dumps({"end": end, "count": count, "writer": writer})
            key = self.bus.keys.fence(fence_id)
            pipe = self.bus.redis.pipeline(transaction=True)
            pipe.hset(key, self.bus.node_id, answer)
            pipe.expire(key, ANSWER_TTL)
            await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("replay fence of %s not answered (%s)", node_id, exc)
