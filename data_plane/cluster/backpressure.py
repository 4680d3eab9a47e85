"""Back-pressure across nodes: a subscriber that backs up slows the publishers that feed it,
wherever they are connected — as TCP does for Mosquitto or EMQX, instead of the broker reading
flat out and dropping at the subscriber's queue.

On one node a backed-up session names itself in `Published.slow_down` and the publisher's read
gate stops reading it until the session drains (data_plane.broker.flow). Across nodes there is
no connection to stop, so the chain has two links, each bounded in time:

1. Receiving side (`Hold`): the node's stream reader (`receive.Receiver`) is a held publisher.
   A route it makes that names sessions in `slow_down` stops it reading its stream until they
   release it (`unthrottle_by`, when drained, as they release a connection), or until a limit
   after the first one held it: then the reader no longer waits for those sessions (their QoS 0
   copies drop at their cap, counted) until they release it, drained to their release mark.
   (Not `stalled`, which a connection's read gate sets and a session clears only once its
   queue is empty: a subscriber fed steadily, only slower than its publishers, never empties
   it, and lost all its overflow after its first long hold.) Meanwhile what other nodes
   forward waits in Redis (the stream is the buffer); entries are acknowledged only once
   delivered (and committed).

   The reader is shared: every session of the node gets what other nodes forward through it,
   in order, so while one session holds it all of them wait. The limit is therefore short
   (`SHARED_HOLD_LIMIT`) when messages for other sessions wait behind the hold — the rest of
   the read, or the stream's next entries, read on while held and looked at again every
   `CHECK_EVERY` —, or a control message does (a session takeover: a client's CONNECT on
   another node waits for it), and a connection's (THROTTLE_LIMIT, 2 s) only when nothing else
   waits (a fan-in into the holding sessions: holding then costs nobody else). Every hold while others
   wait spends one allowance (SHARED_HOLD_LIMIT, refilled at SHARED_HOLD_SHARE of the time),
   so sessions taking turns — from any tenant — cannot chain their holds into a stall of the
   node. A stuck or bursty subscriber loses its QoS 0 overflow as before, instead of slowing
   every other session of its node to its pace.

2. Sending side (`Backlogs`): the forwarder reads the length of each destination's stream in
   the pipeline that writes to it (XLEN: one more command in a round trip it makes anyway, no
   call per message). A destination past `PAUSE_ENTRIES` is `lagging`: a publish forwarded
   there names its `Backlog` in `slow_down`, so its publisher's read gate holds it, until the
   stream is down to `RESUME_ENTRIES` (the forwarder re-reads the lengths every `RECHECK`
   seconds while any destination lags: a held publisher writes nothing that would measure it).
   The gate bounds each hold by THROTTLE_LIMIT too: a `Backlog` that held a publisher that
   long is `stalled` and holds nobody more until its destination drains (a node that stopped
   reading cannot hold the cluster's publishers; its stream's cap bounds Redis, as before).

A reader that keeps up trims its stream as it acknowledges (`receive`), so the length is what
waits: entries not read yet, and the read it is working on (at most one XREADGROUP's count).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from data_plane.broker.flow import ReadGate
from data_plane.broker.ports import Publisher, Recipient
from data_plane.broker.rates import TokenBucket
from data_plane.broker.session import Session

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker
    from data_plane.broker.message import Message
    from data_plane.cluster.codec import Groups

log = logging.getLogger("data_plane.cluster")

# A destination stream this long (entries, each one forward batch of at most BATCH_BYTES =
# 256 KiB) holds the publishers that forward to it: at most 8 MiB of Redis per stream (plus
# what the senders had buffered when they learnt it: PAUSE_BYTES each, and what their publishers'
# last reads brought), where STREAM_MAXLEN's worst case is 10,000 entries = 2.5 GiB. It is half
# of one of the reader's reads (XREADGROUP count=64): a reader that keeps up, whose stream is
# trimmed as it acknowledges, finds a few entries per read; one that finds 32 waiting, or holds
# a read it cannot deliver (its entries stay in the stream until acknowledged), is behind.
# (Counted in entries, not bytes: XLEN is O(1), a stream's memory is not.)
PAUSE_ENTRIES = 32
# ... and lets them go once it is down to a quarter of that: the reader still has those to work
# on while the publishers' next messages come, so it does not idle between the two.
RESUME_ENTRIES = 8
# Seconds the sessions a stream reader delivers to may hold it at once when messages for other
# sessions wait behind them (`others_wait`: the rest of the entry, or the next one): then
# every other session of the node waits too. Measured (bench.cluster_loss --slow1 10: one of
# 10 subscribers reads 2 ms in every 500 ms): with 0.1 s the other 9 went at the pace they had
# without any hold and lost nothing; with 2 s at a fifth of it. When only the holding sessions'
# messages wait (a fan-in into them), the limit is a connection's (ReadGate.THROTTLE_LIMIT,
# 2 s): a subscriber that reads steadily but slower than its publishers can be behind for
# longer than 0.1 s (its socket buffers drain first; a paho client in the tests lost two thirds
# of a fan-in at 0.1 s, and some at 0.5 s), and holding then costs nobody else.
SHARED_HOLD_LIMIT = 0.1
# ... and that allowance is shared by every hold while others wait, refilled at this share of
# the time: sessions that back up one after another (each skipped once its hold expires, or
# draining just before it does) would otherwise chain their holds and stall everyone else on
# the node as long as they take turns — from one tenant, every tenant's cross-node intake. The
# share is what one stuck session takes on its own (held SHARED_HOLD_LIMIT, then skipped
# SKIP_FOR), so a single slow subscriber is held as before.
SHARED_HOLD_SHARE = 0.1 / (0.1 + 0.5)
CHECK_EVERY = 0.05  # seconds between looks at what waits behind a long hold
# Seconds a session that held the reader a whole allowance is not waited for, unless it drains
# to its release mark first. Without an end, a session skipped under a steady flood never got
# back to that mark, and lost the rest of the flood (a paho fan-in lost two thirds).
SKIP_FOR = 0.5
RECHECK = 0.05  # seconds between re-reads of the lengths while a destination lags


class Hold:
    """The stream reader as a publisher the sessions it delivers to may hold (the read gate's
    contract: `unthrottle_by`; sessions keep it in `blocked_publishers`)."""

    __slots__ = (
        "throttled_by",
        "skipped",
        "since",
        "holds",
        "expired",
        "seconds",
        "allowance",
        "_waiter",
    )

    def __init__(self) -> None:
        self.throttled_by: set[Recipient] = set()  # sessions that backed up with what we delivered
        # Sessions that held us for the whole allowance -> when: not waited for until they
        # release us, or SKIP_FOR seconds have passed.
        self.skipped: weakref.WeakKeyDictionary[Recipient, float] = weakref.WeakKeyDictionary()
        self.since = 0.0  # when the first of them held us (monotonic)
        self.holds = 0  # times the reader stopped for backed-up sessions (metrics)
        self.expired = 0  # holds ended by their limit: those sessions skipped (metrics)
        self.seconds = 0.0  # spent held (metrics)
        # Seconds the reader may still be held while others wait, refilled at SHARED_HOLD_SHARE.
        self.allowance = TokenBucket(SHARED_HOLD_SHARE, SHARED_HOLD_LIMIT)
        self._waiter: asyncio.Future[None] | None = None

    def slow_down(self, sessions: tuple[Recipient, ...]) -> None:
        """These sessions backed up with a message just delivered: stop once it is safe."""
        for session in sessions:
            skipped_at = self.skipped.get(session)
            if skipped_at is not None:
                if time.monotonic() - skipped_at < SKIP_FOR:
                    continue
                del self.skipped[session]
            if session not in self.throttled_by:
                if not self.throttled_by:
                    self.since = time.monotonic()
                    self.holds += 1
                self.throttled_by.add(session)
                session.hold(self)

    def unthrottle_by(self, session: Session) -> None:
        self.throttled_by.discard(session)
        self.skipped.pop(session, None)
        if not self.throttled_by:
            self._wake()

    async def wait(self, others_wait: bool) -> None:
        """Until every session holding us let go, or the limit after the first did (then they
        are skipped), or CHECK_EVERY seconds have passed (the caller looks again whether others
        wait: it reads on). The limit is short when messages for other sessions wait behind
        them (SHARED_HOLD_LIMIT, and no more than what is left of the allowance all holds
        share then), else a connection's (ReadGate.THROTTLE_LIMIT)."""
        if not self.throttled_by:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        now = time.monotonic()
        if others_wait:
            deadline = min(self.since + SHARED_HOLD_LIMIT, now + self.allowance.available(now))
        else:
            deadline = self.since + ReadGate.THROTTLE_LIMIT
        if deadline - now <= CHECK_EVERY:
            timer = loop.call_later(max(0.0, deadline - now), self._expire)
        else:
            timer = loop.call_later(CHECK_EVERY, self._wake)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
            held = time.monotonic() - now
            self.seconds += held
            if others_wait:  # spent, down to nothing left
                self.allowance.take(min(held, self.allowance.available()))

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def others_wait(
        self, broker: Broker, messages: list[tuple[int, Message, Groups, int]], at: int
    ) -> bool:
        """Whether any of `messages` from `at` goes to a session not holding us (only while
        held: a route lookup per topic, the rest of one entry)."""
        held, match = self.throttled_by, broker.router.match
        seen: set[tuple[str, str]] = set()
        for _flags, message, _groups, _seq in messages[at:]:
            key = (message.tenant, message.topic)
            if key in seen:
                continue
            seen.add(key)
            subscribers, groups = match(*key)
            if groups or any(sub.session not in held for sub in subscribers):
                return True
        return False

    def _expire(self) -> None:
        """Held for the whole allowance: those sessions are not draining. The reader goes on
        without them (their QoS 0 copies drop at their cap) until they release it, drained to
        their release mark (it stays among their `blocked_publishers` for that), or SKIP_FOR
        has passed."""
        self.expired += 1
        log.info(
            "forward stream reader held %.2f s by %d sessions: going on without them",
            time.monotonic() - self.since,
            len(self.throttled_by),
        )
        now = time.monotonic()
        for session in self.throttled_by:
            self.skipped[session] = now
        self.throttled_by.clear()
        self._wake()


class Backlog:
    """A destination whose stream backs up, as a throttler of publishing connections: a
    `Recipient` of `Published.slow_down` (the read gate calls `hold` and sets `stalled`, as it
    does a session's)."""

    __slots__ = ("node_id", "blocked_publishers", "stalled")
    tenant = None  # a `Recipient` (data_plane.broker.ports) that is no tenant's subscriber

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.blocked_publishers: dict[Publisher, None] = {}  # in the order they were held
        self.stalled = False  # held a publisher for the whole allowance: holds nobody more

    def hold(self, publisher: Publisher) -> None:
        self.blocked_publishers[publisher] = None

    def release(self) -> None:
        blocked, self.blocked_publishers = self.blocked_publishers, {}
        for connection in blocked:
            connection.unthrottle_by(self)


class Backlogs:
    """The forwarder's destinations' stream lengths, and the `lagging` ones (publish reads it)."""

    def __init__(self, redis: Any, stream_of: Any) -> None:
        self.redis = redis
        self.stream_of = stream_of
        self.lagging: dict[str, Backlog] = {}  # node -> its Backlog, while past PAUSE_ENTRIES
        self.paused = 0  # times a destination passed PAUSE_ENTRIES (metrics)
        self._rechecking = False

    def measure(self, pipe: Any, node_ids: Any) -> None:
        """The length of each destination's stream, in the pipeline that writes to them."""
        for node_id in node_ids:
            pipe.xlen(self.stream_of(node_id))

    def update(self, node_ids: Any, lengths: list[int]) -> None:
        for node_id, length in zip(node_ids, lengths, strict=True):
            backlog = self.lagging.get(node_id)
            if backlog is None:
                if length >= PAUSE_ENTRIES:
                    self.lagging[node_id] = Backlog(node_id)
                    self.paused += 1
                    if not self._rechecking:
                        self._rechecking = True
                        asyncio.get_running_loop().create_task(self._recheck())
            elif length <= RESUME_ENTRIES:
                del self.lagging[node_id]
                backlog.release()

    def slowing(self, targets: Any) -> tuple[Backlog, ...]:
        """The Backlogs a publish forwarded to `targets` should be held by."""
        lagging = self.lagging
        return tuple(
            backlog
            for node_id in targets
            if (backlog := lagging.get(node_id)) is not None and not backlog.stalled
        )

    def release_all(self) -> None:
        lagging = list(self.lagging.values())
        self.lagging.clear()
        for backlog in lagging:
            backlog.release()

    async def _recheck(self) -> None:
        """While a destination lags: its held publishers write nothing that would measure it."""
        try:
            while self.lagging:
                await asyncio.sleep(RECHECK)
                node_ids = list(self.lagging)
                pipe = self.redis.pipeline(transaction=False)
                self.measure(pipe, node_ids)
                try:
                    lengths = await pipe.execute()
                except (RedisError, OSError) as exc:  # the bus's own trouble is not a backlog
                    log.debug("destination streams not measured (%s): publishers let go", exc)
                    self.release_all()
                    return
                self.update(node_ids, lengths)
        finally:
            self._rechecking = False
