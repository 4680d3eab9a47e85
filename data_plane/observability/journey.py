"""The journey recorder: every PUBLISH's outcome and every client's events, as rows (see
`common.journey.schema`), gathered on the event loop and handed every `interval` seconds to a
worker thread that writes them as Parquet (`journey_writer`).

The hot path is `published`, called once per PUBLISH a client got through admission: it appends
each field to its column (no dict or tuple per message, nothing the garbage collector tracks;
who published is a row of a small per-batch table, as in the archive), in C where the archive's
compiled module is built (`_recorder.Outcomes`: about 570 instructions and 0.09 us a message,
reading the message's slots directly and remembering the last publisher's row, against 0.9 us for
the Python recorder). Everything else (refusals, later drops, client events) is rare
by comparison and appends a dict.

Client events carry `version`: one number per node that only grows (microseconds since the epoch,
or one more than the last if the clock has not moved), so a client's events sort in the order
they happened here. Across nodes (a takeover) the numbers follow the nodes' clocks. A takeover's
rows name the other node (`from_node` on `connected`, `to_node` on `taken_over`): the cluster
notes it beforehand through `arriving` and `leaving` (`journey_moves`).
"""

from __future__ import annotations

import logging
import time
from array import array
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from common.journey.schema import (
    ACL_DENIED,
    DROPPED,
    EXPIRED,
    QUEUE_FULL,
    QUOTA_EXCEEDED,
    SERVED,
    TOO_LARGE,
)
from common.mqtt.packets import Publish, Subscription
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker.connection import MQTTConnection
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.broker.ports import Published
from data_plane.broker.session import Delivery, Session
from data_plane.observability.journey_moves import NOBODY, Moves
from data_plane.storage.archive_columns import native

log = logging.getLogger(__name__)

# A subscriber's delivery lost later: the session's cause -> (outcome, reason in words).
DROP_CAUSES = {
    "queue_full": (QUEUE_FULL, "the subscriber's queue was full (max_queued_messages)"),
    "expired": (EXPIRED, "the message expired before the subscriber took it"),
    "too_large": (TOO_LARGE, "larger than the subscriber's Maximum Packet Size"),
    "acl": (ACL_DENIED, "the subscriber may no longer read this topic"),
    "offline_qos0": (DROPPED, "QoS 0 to an offline session is not kept"),
    "group_full": (
        QUEUE_FULL,
        "the shared group had no member and kept as much as it may "
        "(max_group_messages, max_group_bytes)",
    ),
    "not_authorized": (ACL_DENIED, "no member of the shared group may read this topic"),
}
SLOW_QOS0 = "a slow subscriber: QoS 0 is dropped once 100 QoS 0 messages wait for it (at most once)"
TAKEN_OVER = "another connection took over this client id"
COUNTED_DEAD = "this node was counted dead by the cluster: another node holds its sessions now"
# Disconnect reasons (`Connection.disconnect_reason`) that the client chose.
CLIENT_INITIATED = frozenset({"normal", "tcp_closed", "normal_with_will"})
# Reasons by name -> the code the server sent (the reverse of `stats.DISCONNECT_REASONS`).
REASON_CODES = {
    "keepalive_timeout": RC.KEEP_ALIVE_TIMEOUT,
    "takenover": RC.SESSION_TAKEN_OVER,
    "kicked": RC.ADMINISTRATIVE_ACTION,
    "not_authorized": RC.NOT_AUTHORIZED,
    "protocol_error": RC.PROTOCOL_ERROR,
    "server_shutting_down": RC.SERVER_SHUTTING_DOWN,
    "normal": RC.SUCCESS,
}


@dataclass(slots=True)
class Lost:
    """What a publish row says of the deliveries its subscribers dropped as it arrived (an
    offline session's full queue, QoS 0 to an offline session, a slow QoS 0 reader): the id its
    drop rows carry too, how many there were, how many of them the row had counted as `queued`
    (offline), and the causes in words."""

    message_id: str
    lost: int = 0
    offline: int = 0
    causes: dict[str, int] = field(default_factory=dict)  # "outcome: words" -> count

    def reason(self) -> str:
        """ "dropped by 1 subscriber as it arrived (queue_full: the subscriber's queue was
        full …)": the row's `reason`."""
        parts = [
            f"dropped by {n} subscriber{'' if n == 1 else 's'} as it arrived ({cause})"
            for cause, n in self.causes.items()
        ]
        return "; ".join(parts)


class PublishColumns:
    """The outcomes of routed publishes since the last hand-off, column by column.

    With the archive's compiled module (`data_plane.storage._recorder.Outcomes`) the columns are
    its `Buffer`s and topics are copied as UTF-8 (`topic`, with `topic_size`); without it they
    are `array`s and a list of `str` (`topic_size` None), filled by the Python recorder below."""

    __slots__ = (
        "publishers",
        "rows",
        "native",
        "publisher",
        "ts",
        "topic",
        "topic_size",
        "qos",
        "size",
        "packet_id",
        "sessions",
        "queued",
        "linked",
    )

    def __init__(self, *, use_c: bool | None = None) -> None:
        self.publishers: list[tuple[str, str]] = []  # (tenant, client id)
        self.rows: dict[Any, int] = {}  # Origin (or the values, without one) -> row
        self.native = native is not None if use_c is None else use_c
        # Rows whose message some subscriber dropped as it arrived (rare): row -> `Lost`.
        self.linked: dict[int, Lost] = {}
        if self.native:
            self.ts = native.Buffer("d")
            self.publisher, self.size, self.packet_id = (native.Buffer("I") for _ in range(3))
            self.sessions, self.queued, self.topic_size = (native.Buffer("I") for _ in range(3))
            self.qos, self.topic = native.Buffer("B"), native.Buffer("B")
        else:
            self.ts = array("d")  # time.time()
            self.publisher, self.size, self.packet_id = array("I"), array("I"), array("I")
            self.sessions, self.queued = array("I"), array("I")
            self.qos = bytearray()
            self.topic: Any = []
            self.topic_size = None

    def __len__(self) -> int:
        return len(self.publisher)

    def new_row(self, message: Message) -> int:
        """The row of `message`'s publisher, added at its first message in the batch."""
        origin = message.origin
        key = (message.tenant, message.publisher) if origin is None else origin
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = len(self.publishers)
            self.publishers.append((message.tenant, message.publisher))
        return row

    def recorder(self) -> Any:
        """The function the broker calls per routed PUBLISH: (message, packet_id, published)."""
        if self.native:
            return native.Outcomes(
                self.ts,
                self.publisher,
                self.qos,
                self.size,
                self.packet_id,
                self.sessions,
                self.queued,
                self.topic,
                self.topic_size,
                self.rows,
                self.new_row,
            ).record
        # Every method bound once: this runs per message (see the module's docstring).
        rows_get, new_row = self.rows.get, self.new_row
        add_publisher, add_ts = self.publisher.append, self.ts.append
        add_topic, add_qos = self.topic.append, self.qos.append
        add_size, add_packet_id = self.size.append, self.packet_id.append
        add_sessions, add_queued = self.sessions.append, self.queued.append
        now = time.time

        def published(message: Message, packet_id: int | None, outcome: Published) -> None:
            row = rows_get(message.origin)
            add_publisher(new_row(message) if row is None else row)
            add_ts(now())
            add_topic(message.topic)
            add_qos(message.qos)
            add_size(len(message.payload))
            add_packet_id(packet_id or 0)
            add_sessions(outcome[0])
            add_queued(outcome[3])

        return published


class JourneyRecorder:
    """What the broker and its hooks call; `take()` hands the rows gathered to the writer."""

    def __init__(self, node: str, *, use_c: bool | None = None) -> None:
        self.node = node
        self.use_c = use_c  # None: the compiled recorder where it is built
        self._last_version = 0
        self._columns = PublishColumns(use_c=use_c)
        self.published = self._fast = self._columns.recorder()
        # Deliveries dropped since the last routed publish was recorded: (message, its drop
        # row, whether the session was offline). One dropped as its message arrived is linked
        # to that message's row when the row is recorded (`_published_after_drops`).
        self._arrivals: list[tuple[Any, dict[str, object], bool]] = []
        self.others: list[dict[str, object]] = []  # message rows off the hot path
        self.events: list[dict[str, object]] = []  # client rows
        self.moves = Moves()  # takeovers: where a session came from, where it went
        self.arriving, self.leaving = self.moves.arriving, self.moves.leaving  # (the cluster's)

    # -- messages ---------------------------------------------------------------------------

    def message(
        self,
        tenant: str,
        client_id: str,
        topic: str,
        qos: int,
        size: int,
        outcome: str,
        reason: str,
        *,
        packet_id: int | None = None,
        reason_code: int | None = None,
        quota: str | None = None,
        subscriber: str | None = None,
        sessions: int | None = None,
        queued: int | None = None,
        message_id: str | None = None,
        lost: int | None = None,
    ) -> dict[str, object]:
        """A row off the hot path: a refusal, a later drop, a will."""
        row: dict[str, object] = {
            "tenant": tenant,
            "ts": int(time.time() * 1000),
            "client_id": client_id,
            "topic": topic,
            "qos": qos,
            "size": size,
            "packet_id": packet_id or None,
            "outcome": outcome,
            "sessions": sessions,
            "queued": queued,
            "reason": reason or None,
            "reason_code": reason_code,
            "quota": quota,
            "subscriber": subscriber,
            "node": self.node,
            "message_id": message_id,
            "lost": lost,
        }
        self.others.append(row)
        return row

    def refused(self, conn: MQTTConnection, packet: Publish, decision: Any) -> None:
        """A PUBLISH admission refused (`admission.Refuse` or `Disconnect`)."""
        quota = decision.quota
        if quota == "message_size":
            outcome, quota = TOO_LARGE, None
        elif quota:
            outcome = QUOTA_EXCEEDED
        elif "denied" in decision.counts:
            outcome = ACL_DENIED
        else:
            outcome = DROPPED
        reason = decision.reason or _default_reason(outcome)
        self.message(
            conn.tenant,
            conn.client_id,
            packet.topic,
            packet.qos,
            len(packet.payload),
            outcome,
            reason,
            packet_id=packet.packet_id,
            reason_code=decision.reason_code,
            quota=quota,
        )

    def served(self, conn: MQTTConnection, message: Message, packet_id: int | None) -> None:
        """A device shadow request, taken by the shadow service (not routed): its replies, on
        the thing's reply topics, are rows of their own."""
        self.message(
            conn.tenant,
            conn.client_id,
            message.topic,
            message.qos,
            len(message.payload),
            SERVED,
            "answered on the shadow's reply topics (accepted or rejected)",
            packet_id=packet_id,
        )

    def dropped(self, session: Session, delivery: Delivery, cause: str) -> None:
        """The `message.dropped` hook: a delivery lost at one subscriber."""
        outcome, reason = DROP_CAUSES.get(cause, (DROPPED, cause))
        if cause == "queue_full" and delivery.qos == 0 and session.connection is not None:
            outcome, reason = DROPPED, SLOW_QOS0
        message = delivery.message
        row = self.message(
            message.tenant,
            message.publisher,
            message.topic,
            message.qos,
            len(message.payload),
            outcome,
            reason,
            subscriber=session.client_id,
        )
        # Dropped as it arrived? Then its publish row is recorded next (the broker calls
        # `published` right after routing it): the slow path below links the two. A drop of
        # an older message (expired, pushed out) is claimed by nobody and stays as it is.
        self._arrivals.append((message, row, session.connection is None))
        self.published = self._published_after_drops

    def _published_after_drops(
        self, message: Message, packet_id: int | None, outcome: Published
    ) -> None:
        """`published` while drops wait to be claimed: record the row, then link the drops of
        this very message to it, so the row tells its final fate ("delivered to 0 of 1
        sessions") and the drop rows carry its id. Back to the fast recorder afterwards."""
        self._fast(message, packet_id, outcome)
        lost = self._claim(message, packet_id)
        if lost is not None:
            self._columns.linked[len(self._columns) - 1] = lost

    def _claim(self, message: Any, packet_id: int | None) -> Lost | None:
        """The drops of `message` recorded as it was routed, now marked with its id; the rest
        (drops of earlier messages) are forgotten here, their rows unchanged."""
        arrivals, self._arrivals = self._arrivals, []
        self.published = self._fast
        mine = [(row, offline) for m, row, offline in arrivals if m is message]
        if not mine:
            return None
        lost = Lost(f"{self.node}-{self._version()}")
        for row, offline in mine:
            row["message_id"] = lost.message_id
            row["packet_id"] = packet_id or None
            lost.lost += 1
            lost.offline += offline
            cause = f"{row['outcome']}: {row['reason']}"
            lost.causes[cause] = lost.causes.get(cause, 0) + 1
        return lost

    # -- clients ----------------------------------------------------------------------------

    def _version(self) -> int:
        version = max(time.time_ns() // 1000, self._last_version + 1)
        self._last_version = version
        return version

    def client(
        self,
        tenant: str,
        client_id: str,
        event: str,
        *,
        reason_code: int | None = None,
        reason: str | None = None,
        initiator: str | None = None,
        detail: str | None = None,
        from_node: str | None = None,
        to_node: str | None = None,
    ) -> None:
        if not tenant or not client_id:  # a stranger: no tenant to keep it for
            return
        self.events.append(
            {
                "tenant": tenant,
                "ts": int(time.time() * 1000),
                "client_id": client_id,
                "event": event,
                "version": self._version(),
                "reason_code": reason_code,
                "reason": reason,
                "initiator": initiator,
                "detail": detail,
                "node": self.node,
                "from_node": from_node,
                "to_node": to_node,
            }
        )

    def listen(self, hooks: Hooks) -> None:
        hooks.add("message.dropped", self.dropped)
        hooks.add("client.connected", self._connected)
        hooks.add("client.disconnected", self._disconnected)
        hooks.add("client.refused", self._refused)
        hooks.add("session.subscribed", self._subscribed)
        hooks.add("session.unsubscribed", self._unsubscribed)
        hooks.add("session.expired", self._expired)
        hooks.add("session.will", self._will)
        hooks.add("session.replayed", self._replayed)

    def _connected(self, conn: MQTTConnection) -> None:
        session = conn.session
        detail = (
            f"from {conn.peer}, MQTT {'5.0' if conn.protocol_version == 5 else '3.1.1'}, "
            f"clean start {'yes' if conn.clean_start else 'no'}, session expiry "
            f"{session.expiry_interval if session is not None else 0} s"
        )
        from_node = self.moves.came_from(conn.tenant, conn.client_id)
        self.client(
            conn.tenant,
            conn.client_id,
            "connected",
            reason_code=0,
            detail=detail,
            from_node=from_node,
        )

    def _disconnected(self, conn: MQTTConnection) -> None:
        reason = conn.disconnect_reason or "normal"
        if reason == "takenover":
            to_node = self.moves.went_to(conn.tenant, conn.client_id, self.node)
            self.client(
                conn.tenant,
                conn.client_id,
                "taken_over",
                reason_code=RC.SESSION_TAKEN_OVER,
                reason=COUNTED_DEAD if to_node == NOBODY else TAKEN_OVER,
                initiator="server",
                to_node=to_node or None,
            )
            return
        code = REASON_CODES.get(reason)
        if code is None and reason.startswith("0x"):
            try:
                code = int(reason, 16)
            except ValueError:
                code = None
        self.client(
            conn.tenant,
            conn.client_id,
            "disconnected",
            reason_code=code,
            reason=reason,
            initiator="client" if reason in CLIENT_INITIATED else "server",
        )

    def _refused(
        self, conn: MQTTConnection, kind: str, reason_code: int, reason: str, who: dict
    ) -> None:
        """`client.refused`: only refused CONNECTs become client events (a publish's refusal
        is its own message row, written by `refused`)."""
        if getattr(conn, "session", None) is not None or kind == "forced_disconnect":
            return
        if kind not in ("auth_failed", "acl_denied", "quota_exceeded"):
            return
        tenant = who.get("tenant", getattr(conn, "tenant", ""))
        client_id = who.get("client_id", getattr(conn, "client_id", ""))
        if reason.startswith("will "):  # a will refused as it went out
            self.client(tenant, client_id, "will_discarded", reason_code=reason_code, reason=reason)
            return
        self.client(tenant, client_id, "connect_failed", reason_code=reason_code, reason=reason)

    def _subscribed(self, session: Session, sub: Subscription) -> None:
        self.client(
            session.tenant,
            session.client_id,
            "subscribed",
            detail=f"{sub.topic_filter} (QoS {sub.qos})",
        )

    def _replayed(self, session: Session, topic_filter: str, start: float, sent: int) -> None:
        since = datetime.fromtimestamp(start, UTC).isoformat(timespec="seconds")
        detail = f"{topic_filter} from {since}: {sent} message{'' if sent == 1 else 's'}"
        self.client(session.tenant, session.client_id, "replayed", detail=detail)

    def _unsubscribed(self, session: Session, topic_filter: str) -> None:
        self.client(session.tenant, session.client_id, "unsubscribed", detail=topic_filter)

    def _expired(self, session: Session) -> None:
        self.client(
            session.tenant,
            session.client_id,
            "session_expired",
            reason=f"no connection for its expiry interval ({session.expiry_interval} s)",
        )

    def _will(self, session: Session | None, will: Message, outcome: Published) -> None:
        """`session.will`: a will went out (`outcome`: its `Published`)."""
        client_id = session.client_id if session is not None else will.publisher
        self.client(will.tenant, client_id, "will_published", detail=will.topic)
        lost = self._claim(will, None)
        reason = "the client's will"
        if lost is not None:
            reason = f"{reason}, {lost.reason()}"
        self.message(
            will.tenant,
            client_id,
            will.topic,
            will.qos,
            len(will.payload),
            "delivered" if outcome[0] else "no_subscribers",
            reason,
            sessions=outcome[0],
            queued=outcome[3] - (lost.offline if lost is not None else 0),
            message_id=lost.message_id if lost is not None else None,
            lost=lost.lost if lost is not None else None,
        )

    # -- hand-off ---------------------------------------------------------------------------

    def take(self) -> tuple[PublishColumns, list[dict[str, object]], list[dict[str, object]]]:
        """The rows gathered since the last call; the recorder starts new columns."""
        columns = self._columns
        self._columns = PublishColumns(use_c=self.use_c)
        self.published = self._fast = self._columns.recorder()
        self._arrivals = []  # a publish is recorded at once after its routing: none waits now
        others, self.others = self.others, []
        events, self.events = self.events, []
        return columns, others, events


def _default_reason(outcome: str) -> str:
    return {
        TOO_LARGE: "larger than the plan's max_message_size",
        ACL_DENIED: "the device may not publish on this topic",
        QUOTA_EXCEEDED: "over a limit of the plan",
    }.get(outcome, "refused")
