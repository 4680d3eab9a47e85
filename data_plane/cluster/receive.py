"""What other nodes forward to this one: its stream, read and delivered here.

The node reads its own stream (`Keys.stream`, written by the others' `forward`) through its
consumer group (XREADGROUP) and acknowledges (XACK) a batch of entries once what they delivered
to persistent sessions is committed — with the last entry's id in the same transaction
(`stream_mark`) — so a survivor that drains the stream after this node died delivers exactly
what was not (see `inherit`). Each message is delivered with `Broker.route` (not counted again
as received, not filtered, not stored as retained: the publishing node did all that), and a
retained message is put in the local retained store too (it is sent to every live node, so a
new subscription anywhere sees it at once; Postgres keeps it across restarts as before).

Besides plain deliveries an entry may carry: a dead node's share of shared-group messages
(`regroup`), messages relayed to one session that moved here (`relay`, `exactly`), or a control
message between nodes (a session takeover: `sessions`). A message for a session that moved
away from here lately, sent before its sender knew, follows it (`departed`). Entries the stream
lost before they were read (trimmed by its cap, gone with a Redis restart) show as a gap in
their writer's count and are counted as dropped (`stream_gap`), never silently.

Back-pressure: a delivery that backs a session up (`Published.slow_down`) stops the reading
until the session drains, bounded by the read gate's allowance (`backpressure.Hold`): what
other nodes forward waits in the stream meanwhile, and their forwarders, seeing it grow, hold
the publishers that feed it (`backpressure.Backlogs`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError, ResponseError

from data_plane.broker.message import Message
from data_plane.broker.ports import Commit
from data_plane.cluster import codec
from data_plane.cluster.backpressure import Hold
from data_plane.cluster.bus import Bus, Drop
from data_plane.cluster.departed import Departed, entry_ms
from data_plane.cluster.exactly import mark, routed
from data_plane.cluster.inherit import GROUP, ensure_group, settle, stream_mark
from data_plane.cluster.regroup import serve_here
from data_plane.cluster.sessions import SessionClaims

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker

log = logging.getLogger("data_plane.cluster")


class Receiver:
    """The consumer of this node's forward stream."""

    broker: Broker  # `attach`, at the node's start

    def __init__(
        self,
        bus: Bus,
        *,
        sessions: SessionClaims,
        departed: Departed,
        drop: Drop,
        handover: Callable[[int, Message, Any, str], None],
    ) -> None:
        self.bus = bus
        self.sessions = sessions  # relayed messages for one session, control messages
        self.departed = departed  # what follows sessions that left lately
        self.handover = handover  # a group's hand-over's ask or answer (`handover`)
        self.drop = drop
        self.received = 0  # messages other nodes forwarded here
        self.stream_seen: dict[bytes, int] = {}  # writer -> its `c` in the last entry read
        self.hold = Hold()  # back-pressure: sessions it backed up hold it (`backpressure`)

    def attach(self, broker: Broker) -> None:
        self.broker = broker

    async def forever(self) -> None:
        """Our stream through its consumer group: an entry is acknowledged once what it
        delivered to persistent sessions is committed (see `inherit`: a survivor delivers what
        is not acknowledged when this node dies)."""
        bus = self.bus
        reader, node_id = bus.reader, bus.node_id
        stream = bus.keys.stream(node_id)
        grouped = False
        while True:
            try:
                if not grouped:  # at start, and after Redis lost it (restarted)
                    await ensure_group(reader, stream)
                    grouped = True
                answer = await reader.xreadgroup(
                    GROUP, node_id, {stream: ">"}, count=64, block=1000
                )
            except (RedisError, OSError) as exc:
                if not isinstance(exc, ResponseError):
                    await asyncio.sleep(min(1.0, bus.heartbeat / 2))
                log.debug("forward stream read failed (%s): retrying", exc)
                grouped = False
                continue
            entries = [entry for _name, read in answer or () for entry in read]
            if entries:
                await self._deliver(stream, entries)

    async def _deliver(self, stream: str, entries: list[codec.StreamEntry]) -> None:
        """Deliver one read's entries in order, and acknowledge them once done.

        Back-pressure (`backpressure.Hold`): a route that backs sessions up stops the delivery
        there until they drain (or THROTTLE_LIMIT passes), the rest of the read waiting in
        memory and the stream waiting in Redis. It stops at once when nothing of this read
        awaits a commit (QoS 0, sessions not persistent); else at the end of the entry, after
        the entries done are marked, committed and acknowledged: a stream mark commits with
        the deliveries it covers, whole entries (`inherit`), so no wait may split them."""
        hold = self.hold
        commits: list[Commit] = []
        acked = 0  # entries[:acked] are acknowledged
        upcoming: dict[
            int, list[codec.Counted]
        ] = {}  # entries decoded ahead (to see who waits behind a hold)
        for index, (entry_id, fields) in enumerate(entries):
            if b"m" not in fields:
                self._control(fields.get(b"c", b"{}"))
                continue
            writer = fields.get(b"w")
            messages = upcoming.pop(index, None)
            if messages is None:
                messages = self._decode(fields[b"m"])
            self._check_gap(writer, fields.get(b"c"), len(messages))
            origin = writer.decode() if writer else ""
            at = 0
            while at < len(messages):
                at = self._receive(messages, at, commits, origin, entry_id)
                if at < len(messages):  # held mid-entry (nothing of this read to commit)
                    await self._acknowledge(stream, entries[acked:index], commits)
                    acked = index
                    await self._held(stream, entries, index, messages, at, upcoming)
            if hold.throttled_by:  # held at the end of the entry
                await self._acknowledge(stream, entries[acked : index + 1], commits)
                acked, commits = index + 1, []
                await self._held(stream, entries, index, messages, len(messages), upcoming)
        await self._acknowledge(stream, entries[acked:], commits)

    async def _held(
        self,
        stream: str,
        entries: list[codec.StreamEntry],
        index: int,
        messages: list[codec.Counted],
        at: int,
        upcoming: dict[int, list[codec.Counted]],
    ) -> None:
        """Wait while sessions hold the reader: briefly if messages for other sessions wait
        behind them — in the rest of this entry, the next one, or (read now, added to this
        read) the stream's next ones —, else up to a connection's allowance, looking again
        every CHECK_EVERY seconds (others' messages may come meanwhile)."""
        hold, broker = self.hold, self.broker
        others = hold.others_wait(broker, messages, at)
        while hold.throttled_by:
            if not others:
                others = await self._others_next(stream, entries, index + 1, upcoming)
            await hold.wait(others)

    async def _others_next(
        self,
        stream: str,
        entries: list[codec.StreamEntry],
        start: int,
        upcoming: dict[int, list[codec.Counted]],
    ) -> bool:
        """Whether others wait behind the hold: a control message in what is read (a session
        takeover or its answer: a client's CONNECT on another node waits for it), or messages
        for sessions not holding the reader in the next entry that has any (of this read, else
        read now and added to it; decoded now, kept for its turn)."""
        if start >= len(entries):  # read on: at most one read more in memory
            bus = self.bus
            try:
                answer = await bus.reader.xreadgroup(GROUP, bus.node_id, {stream: ">"}, count=64)
            except (RedisError, OSError):
                return False
            entries.extend(entry for _name, read in answer or () for entry in read)
        if any(b"m" not in fields for _entry_id, fields in entries[start:]):
            return True
        for index in range(start, len(entries)):
            fields = entries[index][1]
            if b"m" in fields:
                if index not in upcoming:
                    upcoming[index] = self._decode(fields[b"m"])
                return self.hold.others_wait(self.broker, upcoming[index], 0)
        return False

    async def _acknowledge(
        self, stream: str, entries: list[codec.StreamEntry], commits: list[Commit]
    ) -> None:
        """`entries` were delivered: once `commits` (theirs) are, acknowledge and trim them.

        Trimmed at each acknowledgement (MINID: what was handled need not stay in Redis), so the
        stream's length is what waits for this node: the senders read it (`backpressure`)."""
        if not entries:
            return
        bus, last = self.bus, entries[-1][0]
        if commits:  # committed with these deliveries: a survivor skips them (inherit.py)
            stream_mark(self.broker, bus.node_id, last)
        await settle(commits, lambda n: self.drop("store_unavailable", n))
        try:
            pipe = bus.reader.pipeline(transaction=False)
            pipe.xack(stream, GROUP, *(entry_id for entry_id, _ in entries))
            pipe.xtrim(stream, minid=last, approximate=False)
            await pipe.execute()
        except (RedisError, OSError) as exc:  # read again after a restart: at least once
            log.debug("forward stream not acknowledged (%s)", exc)

    def _check_gap(self, writer: bytes | None, sent: bytes | None, count: int) -> None:
        """Entries of a writer missing before this one (trimmed by the stream's cap, lost
        with a Redis restart): their messages are counted as dropped (`stream_gap`)."""
        if writer is None or sent is None:
            return
        sent_now = int(sent)
        before = self.stream_seen.get(writer)
        self.stream_seen[writer] = sent_now
        if before is not None and sent_now - count > before:
            lost = sent_now - count - before
            log.warning("%d forwarded messages from %s lost before read", lost, writer.decode())
            self.drop("stream_gap", lost)

    def _decode(self, batch: bytes) -> list[codec.Counted]:
        try:
            return codec.decode_counted(batch)
        except Exception:
            log.exception("undecodable forwarded batch (%d bytes) dropped", len(batch))
            return []

    def _receive(
        self,
        messages: list[codec.Counted],
        at: int,
        commits: list[Commit],
        origin: str,
        entry_id: bytes,
    ) -> int:
        """Deliver `messages[at:]` (of the entry `entry_id`); returns where it stopped: their
        end, or just after a route that backed sessions up while nothing of this read awaits a
        commit (see `_deliver`)."""
        broker, sessions, hold = self.broker, self.sessions, self.hold
        departed = self.departed
        for index in range(at, len(messages)):
            flags, message, groups, seq = messages[index]
            self.received += 1
            if flags & codec.RETAIN:
                broker.retained.set(message)
            if flags & codec.GROUPS:  # a group's kept copy (handover.py), or a dead node's share
                serve_here(broker, message, groups, commits)  # (regroup.py)
                continue
            if flags & (codec.HANDOVER_ASK | codec.HANDOVER_DONE):
                self.handover(flags, message, groups, origin)
                continue
            if flags & codec.TARGET:  # relayed for one session (data_plane.cluster.relay)
                for client_id, published_at in groups:
                    mark(message, published_at, seq)  # (exactly.py)
                    sessions.targeted(message, client_id, commits)
                routed(message)
                continue
            if flags & codec.DELIVER:  # its plain subscribers here, and the groups given to us
                mark(message, origin, seq)  # (exactly.py)
                published = broker.route(
                    message,
                    lambda group, g=groups: (group.topic_filter, group.name) in g,  # type: ignore[misc]  # (a default binds the entry's groups)
                )
                if published.commits:
                    commits.extend(published.commits)
                if departed.records:  # sessions gone from here lately (departed.py)
                    departed.route(message, entry_ms(entry_id), commits)
                routed(message)
                if published.slow_down:  # sessions it backed up: they hold this reader
                    hold.slow_down(published.slow_down)
                    if not commits:
                        return index + 1
        return len(messages)

    def _control(self, data: bytes) -> None:
        try:
            self.sessions.on_control(json.loads(data))
        except Exception:
            log.exception("control message not handled: %r", data[:200])
