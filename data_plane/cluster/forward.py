"""Forwarding: a publish goes once to each other node with a matching route, in batches.

Transport: one Redis stream per node (`Keys.stream(node)`), written with XADD by every other
node and read by its owner through a consumer group (XREADGROUP, XACK once delivered and, for
persistent sessions, committed). Why a stream and not pub/sub:

- a stream keeps what its reader has not read yet: a node that lost its connection for a moment
  (Redis' output-buffer limit cuts a slow pub/sub client off, the network blips) resumes where
  its group stands instead of losing whatever was published meanwhile; and when the node dies,
  what it had not acknowledged is still there for the survivor (see `inherit`);
- XADD answers once Redis holds the entry, so a QoS 1/2 publisher's acknowledgement can wait
  for it (the entry's commit is one of the `Published.commits` the PUBACK awaits): a message
  the bus refused is refused to its publisher, never acknowledged then lost;
- Redis restarted: XADD fails until it is back (counted as dropped, QoS > 0 refused to the
  publisher as above); entry ids are Redis' clock, so the readers' last ids stay valid.

Back-pressure: a publish that finds `PAUSE_BYTES` waiting for the bus names the forwarder in
its `Published.slow_down`, as a backed-up subscriber's session is named: the publisher's read
gate pauses it until the backlog is down to `RESUME_BYTES`, so a burst waits at the publishers'
sockets instead of being dropped here. And a destination whose stream backs up (its reader is
behind, or held by its backed-up subscribers) holds the publishers that forward to it: each
flush reads the destinations' stream lengths in its own pipeline (`backpressure.Backlogs`).

Batching: messages for a node gather in a buffer for the rest of the event loop's turn (and
while the previous XADD round trip is in flight), then go as one entry per node per round (cut
at `BATCH_BYTES`), all nodes in one pipeline. The stream is capped (`STREAM_MAXLEN` entries,
approximately): a reader that far behind loses the oldest entries rather than Redis its memory.
Such a loss is counted by the reader: every entry carries its writer (`w`) and the number of
messages that writer has sent to that stream so far (`c`), so a gap — entries trimmed by the
cap, or lost with a Redis restart — is counted as dropped (`stream_gap`), never silent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from data_plane.broker.ports import Commit, Publisher
from data_plane.cluster.backpressure import Backlogs
from data_plane.cluster.bus import STREAM_MAXLEN

log = logging.getLogger(__name__)

BATCH_BYTES = 256 * 1024  # one stream entry at most (a bigger message goes alone)
BACKLOG_BYTES = 64 * 1024 * 1024  # buffered while the bus does not answer: beyond, drop
# Back-pressure: a publisher whose message finds this much waiting for the bus stops being read
# (as for a backed-up subscriber, see data_plane.broker.flow) until it is down to RESUME_BYTES.
PAUSE_BYTES = 4 * 1024 * 1024
RESUME_BYTES = 1024 * 1024


class BusUnavailable(Exception):
    """The bus did not take a forwarded message: its publisher is told so (not acknowledged)."""


class Forwarder:
    """The copies for other nodes (see the module's docstring); as a `Recipient`
    (data_plane.broker.ports) of a publish it holds the publishers while the bus lags."""

    tenant = None  # a Recipient that is no tenant's subscriber: the bus

    def __init__(self, redis: Any, stream_of: Callable[[str], str], writer: str = "") -> None:
        self.redis = redis
        self.stream_of = stream_of
        self.writer = writer.encode()
        self.sent: dict[str, int] = {}  # node -> messages written to its stream (the `c` field)
        self.buffers: dict[str, list[bytes]] = {}
        self.buffered = 0
        self.commit: Commit | None = None  # of the messages buffered now (QoS > 0)
        self.losses: list[tuple[str, int]] = []  # (tenant, qos) of what the buffer holds
        self._scheduled = False
        self._flushing = False
        self.forwarded = 0  # messages (one per destination node)
        self.batches = 0
        self.dropped: Counter[str] = Counter()  # reason -> messages
        self.on_drop: Callable[[str, int], None] | None = None  # (tenant, count): tenant stats
        # As a throttler of publishing connections (data_plane.broker.flow reads these two).
        self.blocked_publishers: dict[
            Publisher, None
        ] = {}  # as a session's: in the order they were held
        self.stalled = False
        # The destinations' stream lengths, read with each flush; publish reads `lagging`.
        self.backlogs = Backlogs(redis, stream_of)
        self.lagging = self.backlogs.lagging

    def hold(self, publisher: Publisher) -> None:
        """`publisher` stopped reading for the bus (the read gate acted on `slow_down`):
        release it once the backlog is down to RESUME_BYTES."""
        self.blocked_publishers[publisher] = None

    def _release(self) -> None:
        blocked, self.blocked_publishers = self.blocked_publishers, {}
        for connection in blocked:
            connection.unthrottle_by(self)

    def add(self, node_id: str, data: bytes, tenant: str, qos: int, wait: bool) -> Commit | None:
        """Buffer one message for one node; returns the commit to wait for when `wait`."""
        if self.buffered + len(data) > BACKLOG_BYTES:
            self._drop("backlog", [(tenant, qos)])
            if wait:
                failed = asyncio.get_running_loop().create_future()
                failed.set_exception(BusUnavailable("cluster bus backlog full"))
                return failed
            return None
        buffer = self.buffers.get(node_id)
        if buffer is None:
            buffer = self.buffers[node_id] = []
        buffer.append(data)
        self.buffered += len(data)
        self.losses.append((tenant, qos))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._start)
        if not wait:
            return None
        if self.commit is None:
            self.commit = asyncio.get_running_loop().create_future()
            self.commit.add_done_callback(_retrieve)
        return self.commit

    async def flushed(self) -> None:
        """Everything added so far is on the bus (or counted as dropped)."""
        while self.buffers or self._scheduled or self._flushing:
            await asyncio.sleep(0.001)

    def _start(self) -> None:
        self._scheduled = False
        if not self._flushing:  # else the running flush takes this buffer on its next round
            self._flushing = True
            asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self.buffers:
                buffers, self.buffers = self.buffers, {}
                commit, self.commit = self.commit, None
                losses, self.losses = self.losses, []
                self.buffered = 0
                pipe = self.redis.pipeline(transaction=False)
                entries = 0
                sent_before = dict(self.sent)
                for node_id, parts in buffers.items():
                    for batch, count in _batches(parts):
                        sent = self.sent[node_id] = self.sent.get(node_id, 0) + count
                        pipe.xadd(
                            self.stream_of(node_id),
                            {b"m": batch, b"w": self.writer, b"c": sent},
                            maxlen=STREAM_MAXLEN,
                            approximate=True,
                        )
                        entries += 1
                self.backlogs.measure(pipe, buffers)  # XLEN of each: the same round trip
                try:
                    results = await pipe.execute()
                except (RedisError, OSError) as exc:
                    self.sent = sent_before  # counted as dropped here, not as a gap there
                    log.warning("cluster bus refused %d forwarded messages: %s", len(losses), exc)
                    self._drop("bus_unavailable", losses)
                    if commit is not None:
                        commit.set_exception(BusUnavailable(str(exc)))
                    continue
                self.forwarded += len(losses)
                self.batches += entries
                self.backlogs.update(buffers, results[entries:])
                if commit is not None:
                    commit.set_result(None)
                if self.blocked_publishers and self.buffered < RESUME_BYTES:
                    self._release()
        finally:
            self._flushing = False
            if self.blocked_publishers:
                self._release()

    def _drop(self, reason: str, losses: list[tuple[str, int]]) -> None:
        self.dropped[reason] += len(losses)
        if self.on_drop is not None:
            by_tenant = Counter(tenant for tenant, _ in losses)
            for tenant, count in by_tenant.items():
                self.on_drop(tenant, count)


def _batches(parts: list[bytes]) -> list[tuple[bytes, int]]:
    """The encoded messages as stream entries of at most BATCH_BYTES: (bytes, messages)."""
    out: list[tuple[bytes, int]] = []
    current: list[bytes] = []
    size = 0
    for part in parts:
        if current and size + len(part) > BATCH_BYTES:
            out.append((b"".join(current), len(current)))
            current, size = [], 0
        current.append(part)
        size += len(part)
    if current:
        out.append((b"".join(current), len(current)))
    return out


def _retrieve(future: Commit) -> None:
    """A commit nobody awaited (its publisher left) must not log 'exception never retrieved'."""
    if not future.cancelled():
        future.exception()
