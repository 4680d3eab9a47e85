"""Replay from a time (issue 45): SUBSCRIBE to `$replay/{from}/{filter}` gets the tenant's
archived messages on `filter` from `from` on, in order, then the live ones, each once.

- The cut. The live route and the end of what is read from the archive are one instant: the
  SUBSCRIBE waits for the wall clock's next millisecond (under 1 ms, once per replay) and routes
  the filter at its very start, in the same step of the loop (`cut`). A message routed before
  has an archive time (`ts`, taken as the broker recorded it, in ms) below that millisecond and
  is read from the archive; one routed after is delivered live. Nothing twice, nothing missed —
  on one broker node (a message another node forwarded may be in flight across the cut: it may
  then come twice, as QoS 1 allows).
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from common.mqtt.packets import Subscription
from common.mqtt.topics import parse_replay
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.broker.ports import History
from data_plane.broker.session import Delivery, Session

log = logging.getLogger(__name__)

WAIT = 0.002  # seconds between tries while the client's window is full


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


class Replays:
    """The replays running on this broker."""

    def __init__(
        self, history: History | None, hooks: Hooks, bill: Callable[[Session, int], None]
    ) -> None:
        self.history = history
        self.hooks = hooks  # `session.replayed` when one ends (the journey's event)
        self.bill = bill  # (receiver, units read from history): `Accounts.read_back`
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
        task = asyncio.get_running_loop().create_task(self._run(session, ask))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, session: Session, ask: Ask) -> None:
        history: History = self.history  # type: ignore[assignment]  # started only with one
        loop = asyncio.get_running_loop()
        connection, sent, units = session.connection, 0, 0
        topic_filter, start, qos, ids = ask.topic_filter, ask.start, ask.qos, ask.ids
        try:
            await history.written()
            batches = history.read(session.tenant, topic_filter, int(start * 1000), ask.end_ms)
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
            session.release_live()
            self.replayed += sent
            self.bill(session, units)
            self.hooks.run("session.replayed", session, topic_filter, start, sent)
