"""Back-pressure across nodes: a subscriber that backs up slows the publishers that feed it,
wherever they are connected — as TCP does for Mosquitto or EMQX, instead of the broker reading
flat out and dropping at the subscriber's queue.

On one node a backed-up session names itself in `Published.slow_down` and the publisher's read
gate stops reading it until the session drains (data_plane.broker.flow). Across nodes there is
no connection to stop, so the chain has two links, each bounded in time:

1. Receiving side (`Hold`): the node's stream reader (`receive.Receiver`) is a held publisher.
   A route it makes that names sessions in `slow_down` stops it reading its stream until they
   release it (`unthrottle_by`, when drained, as they release a connection), or
   `ReadGate.THROTTLE_LIMIT` after the first one held it: then those sessions are `stalled`
   (they hold nobody until drained, their QoS 0 copies drop at their cap, counted), exactly as
   a connection's read gate does. Meanwhile what other nodes forward waits in Redis (the stream
   is the buffer); entries are acknowledged only once delivered (and committed), as before.

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
from typing import Any

from redis.exceptions import RedisError

from data_plane.broker.flow import ReadGate

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
RECHECK = 0.05  # seconds between re-reads of the lengths while a destination lags


class Hold:
    """The stream reader as a publisher the sessions it delivers to may hold (the read gate's
    contract: `unthrottle_by`; sessions keep it in `blocked_publishers`)."""

    __slots__ = ("throttled_by", "since", "holds", "expired", "_waiter")

    def __init__(self) -> None:
        self.throttled_by: set = set()  # sessions that backed up with what we delivered
        self.since = 0.0  # when the first of them held us (monotonic)
        self.holds = 0  # times the reader stopped for backed-up sessions (metrics)
        self.expired = 0  # holds ended by THROTTLE_LIMIT: those sessions stalled (metrics)
        self._waiter: asyncio.Future | None = None

    def slow_down(self, sessions: tuple) -> None:
        """These sessions backed up with a message just delivered: stop once it is safe."""
        for session in sessions:
            if session not in self.throttled_by:
                if not self.throttled_by:
                    self.since = time.monotonic()
                self.throttled_by.add(session)
                session.hold(self)

    def unthrottle_by(self, session: Any) -> None:
        self.throttled_by.discard(session)
        if not self.throttled_by and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def released(self) -> None:
        """Until every session holding us let go, or THROTTLE_LIMIT after the first held us."""
        if not self.throttled_by:
            return
        self.holds += 1
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        remaining = self.since + ReadGate.THROTTLE_LIMIT - time.monotonic()
        timer = loop.call_later(max(0.0, remaining), self._expire)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _expire(self) -> None:
        """Held for the whole allowance (as `ReadGate._throttle_expired`): those sessions are
        not draining; they stop holding anyone (and drop at their cap) until they drain."""
        self.expired += 1
        for session in self.throttled_by:
            session.stalled = True
            session.blocked_publishers.pop(self, None)
        self.throttled_by.clear()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class Backlog:
    """A destination whose stream backs up, as a throttler of publishing connections (the read
    gate calls `hold` and sets `stalled`, as it does a session's)."""

    __slots__ = ("node_id", "blocked_publishers", "stalled")

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.blocked_publishers: dict = {}  # in the order they were held
        self.stalled = False  # held a publisher for the whole allowance: holds nobody more

    def hold(self, publisher: Any) -> None:
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

    def update(self, node_ids: Any, lengths: list) -> None:
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

    def slowing(self, targets: Any) -> tuple:
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
