"""Replay from a time (issue 45): SUBSCRIBE to `$replay/{from}/{filter}` gets the tenant's
archived messages on `filter` from `from` on, in order, then the live ones, each once.

- The cut. The live route and the end of what is read from the archive are one instant: the
  SUBSCRIBE waits for the wall clock's next millisecond (under 1 ms, once per replay) and routes
  the filter at its very start, in the same step of the loop (`cut`). A message routed before
  has an archive time (`ts`, taken as the broker recorded it, in ms) below that millisecond and
  is read from the archive; one routed after is delivered live. Nothing twice, nothing missed.
- Across nodes each other node takes a cut of its own once it knows the route (`fence`, the
  cluster's `Fence`): its rows before its cut are read from the archive (its writer's), and a
  live copy it published before its cut — forwarded because it knew the route a moment earlier —
  is dropped as one the replay sends (`Overlap`, by the copy's origin count). A node that does
  not answer in time switches at this node's cut (logged: one in flight may come twice or not).
- The hold. Live deliveries wait for the replayed ones: `Session.hold_live` queues a marker that
  every later delivery waits behind; replayed messages go out ahead of it within the client's
  Receive Maximum (`Session.send_first`), then the marker goes and the queue drains as usual.
  A client that goes mid-replay ends it (a persistent session gets the live messages queued
  meanwhile, not the rest of the replay).
- What it costs: each replayed message is billed as its delivery and once more for its read
  from history (`bill`, in its 5 KiB units), at the replay's end for what was sent.
- What is read: the archive keeps what the tenant's history policies ask for, so only that can
  be replayed; the device's ACL withholds what it may not read, as live (`read_filter`); the
  reading runs in a thread and the sending gives the loop back between batches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from common.mqtt.packets import Subscription
from common.mqtt.topics import parse_replay, topic_matches
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.broker.ports import Fence, History, Ports
from data_plane.broker.session import Delivery, Session

log = logging.getLogger(__name__)

WAIT = 0.002  # seconds between tries while the client's window is full
LINGER = 10.0  # seconds a replay's screen of other nodes' copies stays after it ends


def cut() -> int:
    """The next millisecond of the wall clock, once it has begun: the replay's end."""
    now = int(time.time() * 1000)
    while (moment := int(time.time() * 1000)) == now:
        pass
    return moment


@dataclass(frozen=True, slots=True)
class Ask:
    """What a `$replay` SUBSCRIBE asks for: its filter, from when (Unix time) to the cut (ms),
    and the subscription's QoS, identifiers and No Local."""

    topic_filter: str
    start: float
    end_ms: int
    qos: int
    ids: tuple[int, ...] = ()
    no_local: bool = False


class Overlap:
    """A replay's live copies from other nodes until their cuts are known (`Fence`): each is
    queued behind the replay as any live delivery, and its origin noted; once the fence is
    known, those it covers are withdrawn (the replay sends them from the archive) and later
    ones are screened out before they are queued."""

    def __init__(self, session: Session, topic_filter: str) -> None:
        self.session = session
        self.topic_filter = topic_filter  # (the session's other subscriptions are not replayed)
        self.previous = session.screen  # (the cluster's move window, when it has one)
        self.fence: Fence | None = None
        self.noted: list[tuple[Delivery, str, int]] = []  # live copies before the fence
        session.screen = self.screen

    def screen(self, delivery: Delivery) -> bool:
        if self.previous is not None and not self.previous(delivery):
            return False
        origin = delivery.message.cluster_origin
        if origin is None or not topic_matches(self.topic_filter, delivery.message.topic):
            return True
        node, seq = origin
        if self.fence is None:
            self.noted.append((delivery, node, seq))
            return True
        return seq > self.fence.counts.get(node, 0)

    def known(self, fence: Fence) -> list[Delivery]:
        """The fence is known: the live copies queued so far that the replay sends."""
        self.fence = fence
        noted, self.noted = self.noted, []
        return [d for d, node, seq in noted if seq <= fence.counts.get(node, 0)]

    def close(self) -> None:
        """Done: after `LINGER` (a copy forwarded before a node's cut may still be on the bus),
        the session's screen is what it was."""
        asyncio.get_running_loop().call_later(LINGER, self._restore)

    def _restore(self) -> None:
        if self.session.screen == self.screen:
            self.session.screen = self.previous


class Replays:
    """The replays running on this broker."""

    def __init__(
        self,
        ports: Ports,
        hooks: Hooks,
        bill: Callable[[Session, int], None],
        settle: Callable[[Session, Delivery], None],
    ) -> None:
        self.history = ports.history  # the tenants' archived messages; None: no archive
        # The other nodes' cuts (`Cluster.fence`); None: the only node.
        self.fence: Callable[[], Awaitable[Fence]] | None = (
            ports.cluster.fence if ports.cluster is not None else None
        )
        self.hooks = hooks  # `session.replayed` when one ends (the journey's event)
        self.bill = bill  # (receiver, units read from history): `Accounts.read_back`
        self.settle = settle  # a live copy withdrawn from the queue: its durable copy goes
        self.tasks: set[asyncio.Task[None]] = set()
        self.replayed = 0  # messages sent from the archive, for the figures

    def notice(self, tenant: str, subscriptions: list[Subscription]) -> str | None:
        """What the SUBACK says of the replays it grants (as a Reason String): where one
        cannot start where it asked — the tenant's history keeps less, or nothing."""
        notes = []
        for sub in subscriptions:
            start, inner = parse_replay(sub.topic_filter, time.time())
            if start is None:
                continue
            horizon = self.history.horizon(tenant) if self.history is not None else None
            if horizon is None:
                notes.append(f"{inner}: no history is kept, live messages only")
            elif start < horizon:
                since = datetime.fromtimestamp(horizon, UTC).isoformat(timespec="seconds")
                notes.append(f"{inner}: history is kept from {since}, replayed from there")
        return "; ".join(notes) or None

    def start(self, session: Session, ask: Ask) -> None:
        """Replay the archive over [ask.start, ask.end_ms) to `session`, holding its live
        deliveries meanwhile."""
        if self.history is None:
            return  # no archive on this broker: live only (the SUBACK said so)
        session.hold_live()
        overlap = Overlap(session, ask.topic_filter) if self.fence is not None else None
        task = asyncio.get_running_loop().create_task(self._run(session, ask, overlap))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, session: Session, ask: Ask, overlap: Overlap | None) -> None:
        history: History = self.history  # type: ignore[assignment]  # started only with one
        loop = asyncio.get_running_loop()
        connection, sent, units = session.connection, 0, 0
        topic_filter, start, qos, ids = ask.topic_filter, ask.start, ask.qos, ask.ids
        try:
            await history.written()
            ends: dict[str, int] = {}
            if overlap is not None and self.fence is not None:
                fence = await self.fence()
                ends = {history.writer: ask.end_ms, **fence.ends}
                for delivery in session.withdraw(overlap.known(fence)):
                    self.settle(session, delivery)
                if fence.missing:
                    log.warning(
                        "replay of %s for %s/%s: no cut from %s in time (their messages switch"
                        " at this node's)",
                        topic_filter,
                        *session.key,
                        ", ".join(fence.missing),
                    )
            batches = history.read(
                session.tenant, topic_filter, int(start * 1000), ask.end_ms, ends
            )
            while True:
                batch: list[Message] | None = await loop.run_in_executor(None, next, batches, None)
                if batch is None or session.connection is not connection:
                    return
                for message in batch:
                    if ask.no_local and message.publisher == session.client_id:
                        continue
                    if session.read_filter is not None and not session.read_filter(message.topic):
                        continue
                    delivery = Delivery(message, min(message.qos, qos), False, ids)
                    while not session.send_first(delivery):
                        if session.connection is not connection or connection is None:
                            return
                        await asyncio.sleep(WAIT)
                    sent += 1
                    units += message.billable_units()
                await asyncio.sleep(0)  # the loop is everyone's
        except Exception:
            log.exception("replay of %s for %s/%s failed", topic_filter, *session.key)
        finally:
            if overlap is not None:
                overlap.close()
            session.release_live()
            self.replayed += sent
            self.bill(session, units)
            self.hooks.run("session.replayed", session, topic_filter, start, sent)
