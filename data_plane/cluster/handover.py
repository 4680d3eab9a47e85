"""A shared group's hand-over between nodes (issue 45): a member at one node gets what another
node's holder kept, then the live messages, in each publisher's order.

While a group has no member anywhere, one node's holder keeps its messages (`publish`: the
first node with a `router.HELD` route). When a member comes at node M, publishers switch to M as
they learn its route, each at its own moment, while the holder's node H still holds what came
before. So M takes the group over in three steps (`take`), its holder keeping the live messages
meanwhile (`Holder.awaiting`: a newcomer waits behind the kept ones, as on one node):

1. a fence (`fences`, without the archive): every node answers once it knows M's route, after
   what it forwarded before is on the bus — from then on no node sends the group to H;
2. an ask on H's stream (`codec.HANDOVER_ASK`), behind every copy those nodes sent H before;
3. H hands everything its holder keeps to M (`hand_to`, each settled once on the bus) and then
   says so on M's stream (`codec.HANDOVER_DONE`), behind the last of them.

M delivers the handed copies to its members as they come (`serve_here`: past its own holder's
wait) and, with every holder's answer, lets its holder go: the live messages follow. A holder
that does not answer within `HANDOVER_WAIT` is not waited for longer (logged).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from data_plane.broker.message import Message
from data_plane.broker.router import HELD
from data_plane.cluster import codec
from data_plane.cluster.bus import Peers
from data_plane.cluster.forward import PAUSE_BYTES, Forwarder
from data_plane.cluster.routes import RouteTable, route_key

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker
    from data_plane.broker.ports import Commit, Fence

log = logging.getLogger("data_plane.cluster")

HANDOVER_WAIT = 10.0  # seconds a node taking a group over waits for its holders' answers
HAND_PAUSE = 0.005  # seconds between tries while the bus does not take more

Group = tuple[str, str, str]  # (tenant, filter, name)


class GroupHandover:
    """Both sides of a group's hand-over: taking it (`take`) and handing it (`on_marker`)."""

    broker: Broker  # (`attach`, at the node's start): its holders

    def __init__(
        self,
        node_id: str,
        table: RouteTable,
        peers: Peers,
        forwarder: Forwarder,
        fence: Callable[[bool], Awaitable[Fence]],
        hand_to: Callable[[str, Message, str, str], Commit],
    ) -> None:
        self.node_id = node_id
        self.table = table
        self.peers = peers
        self.forwarder = forwarder
        self.fence = fence  # `Fences.fence`
        self.hand_to = hand_to  # `Publisher.hand_to`
        self.waiting: dict[tuple[Group, str], asyncio.Future[None]] = {}  # (group, holder node)
        self.tasks: set[asyncio.Task[None]] = set()

    def attach(self, broker: Broker) -> None:
        self.broker = broker

    def holders(self, tenant: str, topic_filter: str, name: str) -> list[str]:
        """The live nodes whose holder keeps the group (a `HELD` route)."""
        key, alive = route_key(tenant, topic_filter, HELD + name), self.peers.alive
        return sorted(
            n.node_id for n in self.table.nodes.values() if n.node_id in alive and key in n.routes
        )

    def take(self, tenant: str, topic_filter: str, name: str) -> asyncio.Task[None] | None:
        """The group got its first member here: what other nodes keep of it comes first (the
        task ends once they handed it over); None when no other node keeps it."""
        nodes = self.holders(tenant, topic_filter, name)
        if not nodes:
            return None
        task = asyncio.get_running_loop().create_task(
            self._take((tenant, topic_filter, name), nodes)
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _take(self, group: Group, nodes: list[str]) -> None:
        tenant, topic_filter, name = group
        loop = asyncio.get_running_loop()
        answers = [self.waiting.setdefault((group, node), loop.create_future()) for node in nodes]
        try:
            await self.fence(False)  # from each node's answer on, none sends the group there
            for node in nodes:
                self.forwarder.add(node, _marker(codec.HANDOVER_ASK, group), tenant, 0, False)
            _done, pending = await asyncio.wait(answers, timeout=HANDOVER_WAIT)
            if pending:
                log.warning(
                    "group %s/%s of %s: no hand-over from %d holder(s) within %gs",
                    topic_filter, name, tenant, len(pending), HANDOVER_WAIT,
                )  # fmt: skip
        finally:
            for node in nodes:
                self.waiting.pop((group, node), None)

    def on_marker(self, flags: int, message: Message, groups: Any, origin: str) -> None:
        """A hand-over's ask or answer read from this node's stream (`receive`)."""
        for topic_filter, name in groups:
            group = (message.tenant, topic_filter, name)
            if flags & codec.HANDOVER_DONE:
                answer = self.waiting.get((group, origin))
                if answer is not None and not answer.done():
                    answer.set_result(None)
            elif flags & codec.HANDOVER_ASK:
                task = asyncio.get_running_loop().create_task(self._hand(group, origin))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def _hand(self, group: Group, to: str) -> None:
        """Everything this node's holder keeps of `group` to node `to`, then the answer."""
        tenant, topic_filter, name = group
        holder = self.broker.groups.find(tenant, name, topic_filter)
        if holder is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + HANDOVER_WAIT
            send = lambda m, f, n: (  # noqa: E731  (None while the bus lags: kept, tried again)
                None if self.forwarder.buffered > PAUSE_BYTES else self.hand_to(to, m, f, n)
            )
            while (holder.session.queue or holder.lent) and loop.time() < deadline:
                moved = holder.hand_away(send) if holder.session.queue else 0
                await asyncio.sleep(0 if moved > 0 else HAND_PAUSE)
        self.forwarder.add(to, _marker(codec.HANDOVER_DONE, group), tenant, 0, False)


def _marker(flags: int, group: Group) -> bytes:
    tenant, topic_filter, name = group
    return codec.encode(
        Message(topic_filter, b"", 0, False, tenant=tenant), flags, ((topic_filter, name),)
    )
