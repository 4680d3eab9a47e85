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
message between nodes (a session takeover: `sessions`). Entries the stream lost before they were
read (trimmed by its cap, gone with a Redis restart) show as a gap in their writer's count and
are counted as dropped (`stream_gap`), never silently.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from redis.exceptions import RedisError, ResponseError

from data_plane.cluster import codec
from data_plane.cluster.inherit import GROUP, ensure_group, settle, stream_mark
from data_plane.cluster.regroup import serve_here

log = logging.getLogger("data_plane.cluster")


class Receiver:
    """The consumer of this node's forward stream."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.received = 0  # messages other nodes forwarded here
        self.stream_seen: dict[bytes, int] = {}  # writer -> its `c` in the last entry read

    async def forever(self) -> None:
        """Our stream through its consumer group: an entry is acknowledged once what it
        delivered to persistent sessions is committed (see `inherit`: a survivor delivers what
        is not acknowledged when this node dies)."""
        cluster = self.cluster
        reader, node_id = cluster.reader, cluster.node_id
        stream = cluster.keys.stream(node_id)
        trimmed = time.monotonic()
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
                    await asyncio.sleep(min(1.0, cluster.heartbeat / 2))
                log.debug("forward stream read failed (%s): retrying", exc)
                grouped = False
                continue
            ids = []
            commits: list = []
            for _name, entries in answer or ():
                for entry_id, fields in entries:
                    ids.append(entry_id)
                    if b"m" not in fields:
                        self._control(fields.get(b"c", b"{}"))
                    else:
                        received = self._receive(fields[b"m"], commits, fields.get(b"w"))
                        self._check_gap(fields.get(b"w"), fields.get(b"c"), received)
            if not ids:
                continue
            if commits:  # committed with these deliveries: a survivor skips them (inherit.py)
                stream_mark(cluster.broker, node_id, ids[-1])
            await settle(commits, lambda n: cluster.count_dropped_here("store_unavailable", n))
            try:
                pipe = reader.pipeline(transaction=False)
                pipe.xack(stream, GROUP, *ids)
                if time.monotonic() - trimmed > 1.0:  # what we handled need not stay in Redis
                    trimmed = time.monotonic()
                    pipe.xtrim(stream, minid=ids[-1], approximate=True)
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
            self.cluster.count_dropped_here("stream_gap", lost)

    def _receive(self, batch: bytes, commits: list, writer: bytes | None = None) -> int:
        cluster = self.cluster
        broker, origins = cluster.broker, cluster.origins
        origin = writer.decode() if writer else ""
        try:
            messages = codec.decode_counted(batch)
        except Exception:
            log.exception("undecodable forwarded batch (%d bytes) dropped", len(batch))
            return 0
        for flags, message, groups, seq in messages:
            self.received += 1
            if flags & codec.RETAIN:
                broker.retained.set(message)
            if flags & codec.GROUPS:  # a dead node's group share, handed on (cluster/regroup.py)
                serve_here(broker, message, groups, commits)
                continue
            if flags & codec.TARGET:  # relayed for one session (data_plane.cluster.relay)
                for client_id, published_at in groups:
                    origins.mark(message, published_at, seq)  # (exactly.py)
                    cluster.sessions.targeted(message, client_id, commits)
                continue
            if flags & codec.DELIVER:  # its plain subscribers here, and the groups given to us
                origins.mark(message, origin, seq)  # (exactly.py)
                published = broker.route(
                    message, lambda group, g=groups: (group.topic_filter, group.name) in g
                )
                if published.commits:
                    commits.extend(published.commits)
        return len(messages)

    def _control(self, data: bytes) -> None:
        try:
            self.cluster.sessions.on_control(json.loads(data))
        except Exception:
            log.exception("control message not handled: %r", data[:200])
