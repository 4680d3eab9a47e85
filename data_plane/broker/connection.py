"""One MQTT connection: an `asyncio.Protocol` (TCP and TLS directly; WebSocket through
`data_plane.broker.websocket`, which feeds it the same bytes).

Theory of operation
===================

The connection owns the transport: it frames bytes into packets (the sans-IO `Reader`), writes,
keeps the timers, and dispatches each packet to the collaborator that decides what it means. The
collaborators never import this module; they get the connection through a narrow protocol and
return decisions, and what the connection must do as values (`actions`: `Send`, `Disconnect`,
`Close`…) that `apply` carries out:

- `handshake.Handshake`: CONNECT until CONNACK (a `Refusal`, or the `AuthResult` and a
  `Welcome`; `refuse` says what a refusal does), and enhanced authentication's AUTH exchanges;
- `admission`: PUBLISH (`Accept | Duplicate | Refuse | Disconnect | Pause`) and SUBSCRIBE;
- `acks.Acks`: QoS acknowledgements both ways, each only once what it promises is committed;
- `inbound.Inbound`: applies those decisions (routes, subscribes; `accounting` counts), and
  returns what ends the connection (a DISCONNECT, the client's goodbye);
- `flow.ReadGate`: every reason to stop reading the client (`flow.OutboundPacer`: to write);
- `writer.Writer`: the one write per loop turn; `aliases`: outbound topic aliases;
- `policy`: the tenant's rates and ACL, at CONNECT and whenever the control plane changes them.

State. `state` moves one way: CONNECTING (until CONNACK) → CONNECTED → CLOSING, and CONNECTING
→ CLOSING on a refusal or a loss. `closing` is "state is CLOSING": once set, nothing more is read,
handled or sent except what was already batched; `connection_lost` comes last and releases the
session (and sends the will, if CONNACK was ever sent).

Reading. While a CONNECT is judged (`_judging`, possibly waiting on the database or on the
client's AUTH answers), no packet is handled: the ones read with the CONNECT and the bytes that
follow wait in the handshake, and are handled in order after CONNACK. After it, a read is handled
up to the tenant's share of the loop turn (`ReadGate.read_slice`), and the read gate may pause
reading (a burst, that share had, a 3.1.1 client over its publish rate, subscribers whose queues
its PUBLISH backed up); what was read then waits (`held`, the reader) and goes first after.

Writing. Everything written in one loop turn goes out in one `transport.write` (`writer.Writer`).
From the moment the session is attached until CONNACK is written, writes are held: CONNACK is
the first packet from the server [MQTT-3.2.0-1], and whatever the session delivered meanwhile
follows it. A slow reader pauses our writes (`pause_writing`), which makes the session queue
instead of buffering without bound.

Commits. A QoS 1/2 PUBLISH is acknowledged only once every durable copy it produced is committed
(`Acks.accepted`); if the connection closes first, no acknowledgement is sent and the client
resends. Closing never waits for commits.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from common.mqtt.codec import Reader, encode
from common.mqtt.errors import MQTTError, UnsupportedProtocolVersion
from common.mqtt.packets import MQTT_3_1_1, MQTT_5_0, Connack, Connect, Packet, PacketType
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker import refused
from data_plane.broker.acks import AckOutlet, Acks, PacketBuilder, with_reason
from data_plane.broker.actions import Actions, apply, disconnect_packet
from data_plane.broker.admission import PublishAdmission
from data_plane.broker.aliases import OutboundAliases
from data_plane.broker.auth import AuthResult, peer_certificate
from data_plane.broker.broker import Broker
from data_plane.broker.flow import SHARE_CHECK, OutboundPacer, ReadGate
from data_plane.broker.handshake import Handshake, Refusal
from data_plane.broker.inbound import Inbound, InboundOutlet
from data_plane.broker.message import Message
from data_plane.broker.policy import apply_policy, authorize_session, set_rates
from data_plane.broker.session import Session
from data_plane.broker.stats import DISCONNECT_REASONS
from data_plane.broker.timers import ConnectionTimer
from data_plane.broker.writer import Writer

log = logging.getLogger(__name__)


class State(enum.Enum):
    CONNECTING = "connecting"  # until CONNACK: no CONNECT yet, or one being judged
    CONNECTED = "connected"  # CONNACK sent
    CLOSING = "closing"  # nothing more is read or handled; connection_lost will follow


class MQTTConnection(asyncio.Protocol):
    def __init__(self, broker: Broker, *, transport_name: str = "tcp") -> None:
        self.broker = broker
        self.config = broker.config
        self.transport_name = transport_name
        self.transport: asyncio.Transport | Any = None
        self.reader = Reader(server_side=True, max_packet_size=broker.config.max_packet_size)
        self.loop = asyncio.get_event_loop()
        self.answered: asyncio.Future[None] = self.loop.create_future()  # CONNACK out, or closed
        self._enter(State.CONNECTING)
        self.peer = ""
        # Who, as CONNECT and the authenticator said.
        self.protocol_version = MQTT_3_1_1
        self.tenant = self.device = self.client_id = ""
        self.clean_start = True
        self.auth: AuthResult | None = None
        self.session: Session | None = None
        self.disconnect_reason = ""  # set by whoever ends the connection first
        # What the client negotiated (5.0 CONNECT properties).
        self.client_receive_maximum, self.client_maximum_packet_size = 65535, 268_435_460
        self.problem_information = True  # 5.0 Request Problem Information
        # Collaborators.
        self.handshake = Handshake(self)
        self.admission = PublishAdmission(self.config, broker.retained, broker.shadows)
        # Acks and inbound act after CONNACK only, when `session` and `auth` are set (the casts).
        self.acks = Acks(cast(AckOutlet, self))
        self.gate = ReadGate(self, self.loop, self._process, broker.turns)
        self.inbound = Inbound(cast(InboundOutlet, self), self.admission, self.acks, self.gate)
        self.admission.waiter = self.gate  # woken by the tenant's share when a held publish may go
        self.unthrottle_by = self.gate.unthrottle_by  # a drained subscriber lets us read again
        # What each packet after CONNECT goes to (CONNECT itself is intercepted in _process).
        inbound, acks = self.inbound, self.acks
        self._handlers: dict[PacketType, Callable[[Any], Actions]] = {
            PacketType.PUBLISH: inbound.publish,
            PacketType.PUBACK: acks.puback,
            PacketType.PUBREC: acks.pubrec,
            PacketType.PUBREL: acks.pubrel,
            PacketType.PUBCOMP: acks.pubcomp,
            PacketType.SUBSCRIBE: inbound.subscribe,
            PacketType.UNSUBSCRIBE: inbound.unsubscribe,
            PacketType.PINGREQ: lambda packet: self.send(b"\xd0\x00"),
            PacketType.DISCONNECT: inbound.disconnect,
            PacketType.AUTH: self.handshake.reauthenticate,
        }
        self._aliases = OutboundAliases()
        self.outbound_alias = self._aliases.lookup  # what the session asks per delivery
        self.alias_sent = self._aliases.sent  # and tells once a PUBLISH set a new one
        self.writer = Writer(self, self.loop)
        self.send: Callable[[bytes], None] = self.writer.send  # bound once: called per delivery
        self.write_now = self.writer.now  # what was batched, then this, at once
        self.write_paused = False  # the transport's buffer is full, or CONNACK is not out yet
        self.pacer = OutboundPacer(self, self.loop)
        self.pace = self.pacer.pace  # bound once: the session asks per paced delivery
        self.outbound_bucket: Any = None  # the tenant's outbound bytes/s (inbound: admission)
        self.timer = ConnectionTimer(self, self.loop)  # CONNECT deadline, then keep-alive
        self.will: Message | None = None  # CONNECT's, and its delay: the cluster's will store reads
        self.will_delay, self._send_will = 0, True
        self._judging = False  # a CONNECT is being judged
        self.acked = False  # CONNACK (success) sent: stays true while closing
        # Counted in the tenant's connections (released exactly once); let go (`_release`).
        self._counted = self._released = False
        self.door: Any = None  # its place among the broker's sockets (`doorway`)

    def _enter(self, state: State) -> None:
        self.state = state  # and `closing`, which sessions ask per delivery, a plain attribute
        self.closing = state is State.CLOSING
        if state is not State.CONNECTING and not self.answered.done():
            self.answered.set_result(None)  # a later CONNECT of its client id may go on

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")
        if self.door is None:  # (a WebSocket's came in with its upgrade)
            self.door = self.broker.doorway.enter(peer[0] if isinstance(peer, tuple) else "")
            if self.door is None:  # too many strangers: refused before reading a byte
                self._enter(State.CLOSING)
                transport.abort()
                return
        self.peer_certificate = peer_certificate(transport)  # mTLS: for the authenticator
        self.broker.connections.add(self)
        if hasattr(transport, "set_write_buffer_limits"):
            transport.set_write_buffer_limits(high=self.config.write_buffer_high)
        self.timer.deadline(self.config.connect_timeout)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.timer.last_received = time.monotonic()
        if self._judging:  # authentication in progress: hold the bytes until CONNACK
            self.handshake.buffer(data)
            return
        try:
            packets = self.reader.feed(data, self.gate.read_slice())
        except UnsupportedProtocolVersion:
            # Answer in the form the client can read: 3.1.1 CONNACK "unacceptable version".
            refused.malformed(self, RC.UNSUPPORTED_PROTOCOL_VERSION, "unsupported protocol")
            self.write_now(b"\x20\x02\x00\x01")
            self.close()
            return
        except MQTTError as exc:
            self._protocol_failure(exc.reason_code, str(exc))
            return
        gate = self.gate
        if gate.held or gate.share_had(0):  # what waits goes first; or its share is had
            gate.next_turn(packets)
            return
        gate.after_read(self._process(packets), self.reader.more)

    def _process(self, packets: list[Packet]) -> int:
        """Handle `packets` in order: how many were (the rest waits in the read gate)."""
        gate, handlers, connect = self.gate, self._handlers, PacketType.CONNECT  # per packet
        check = SHARE_CHECK - 1  # the next index after which the tenant's share is looked at
        for index, packet in enumerate(packets):
            if self.closing:
                return index
            try:
                if packet.type is connect:
                    self._judging = True
                    rest = packets[index + 1 :]
                    self.loop.create_task(self._handle_connect(packet, rest))  # type: ignore[arg-type]  # its type says Connect
                    return index + 1
                handler = handlers.get(packet.type)
                if handler is not None and (actions := handler(packet)) is not None:
                    apply(self, actions)  # what the collaborator decided (`actions`)
            except MQTTError as exc:
                self._protocol_failure(exc.reason_code, str(exc))
                return index + 1
            except Exception:
                log.exception("error handling %s from %s", packet.type.name, self.peer)
                self._protocol_failure(RC.UNSPECIFIED_ERROR, "internal error")
                return index + 1
            if gate.rate or gate.throttled_by:
                gate.held.extend(packets[index + 1 :])  # the rest of this read waits too
                return index + 1
            if index == check:
                check += SHARE_CHECK
                if gate.share_had(index + 1):
                    gate.next_turn(packets[index + 1 :])  # the rest waits for a later turn
                    return index + 1
        return len(packets)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.door is None:
            return  # refused at the door: never counted
        self.door.left()
        self.broker.connections.discard(self)
        self._release("tcp_closed" if exc is None else "sock_error")

    def _release(self, reason: str) -> None:
        """The connection is over (closed by us, or lost): its session, will and counts go.
        Once, whichever comes first: our close, or the socket's end."""
        if self._released:
            return
        self._released = True
        self._enter(State.CLOSING)
        self.broker.resends.closed(self.tenant, self.client_id, self.admission.recent)
        self.disconnect_reason = self.disconnect_reason or reason  # whoever ended it first
        self.timer.cancel()
        self.handshake.wake()
        self.pacer.cancel()
        if self.admission.share is not None:
            self.admission.share.leave(self.gate)
        session = self.session
        if session is None:
            return
        if not self.acked:  # gone before CONNACK: never connected, so no will either
            if session.connection is self:
                session.will = None
        elif self.will is not None and self._send_will:
            self.broker.schedule_will(session, self.will, self.will_delay)
        self.broker.detach(session, self)
        self._announce(False)

    @property
    def batch_full(self) -> bool:
        """This loop turn's write batch is already large: QoS 0 waits (bounded) rather than
        growing it, since libuv may hand us many reads in one turn."""
        return self.writer.size > self.config.write_buffer_high

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        if self.writer.hold:
            return  # CONNACK not written yet: deliveries keep queueing
        self.write_paused = False
        if self.session is not None and self.session.connection is self:
            self.session.pump()

    # -- writing ------------------------------------------------------------------------

    def close(self) -> None:
        """End the connection: what was written reaches the client (`Writer.shut`), and the
        session is released on the next loop turn, whatever the client does meanwhile."""
        self._enter(State.CLOSING)
        # Now, not at the release: a connection taking this one over may open before it.
        self.broker.resends.closed(self.tenant, self.client_id, self.admission.recent)
        self.writer.shut(self.config.close_linger)
        self.loop.call_soon(self._release, "server_closed")

    def disconnect(
        self, reason_code: int, reason: str = "", *, reference: str = "", refusal: bool = True
    ) -> None:
        """Server-initiated close: DISCONNECT with a reason on 5.0 after CONNACK (and where to
        go instead, for 0x9C/0x9D); told as a forced disconnect unless already told otherwise."""
        if self.closing:
            return
        if refusal:
            refused.disconnected(self, reason_code, reason)
        if not self.disconnect_reason:
            self.disconnect_reason = DISCONNECT_REASONS.get(reason_code, f"0x{reason_code:02x}")
        if self.session is not None and self.protocol_version == MQTT_5_0:
            build = disconnect_packet(reason_code, reference)
            self.send(self.with_reason(build, reason, always=True))
        self.close()

    def with_reason(self, build: PacketBuilder, reason: str, *, always: bool = False) -> bytes:
        """`build(properties)`, with a Reason String where this client may receive one."""
        version, max_size = self.protocol_version, self.client_maximum_packet_size
        return with_reason(build, reason, version, self.problem_information, max_size, always)

    def taken_over(self, with_will: bool = True) -> None:
        """Another connection claimed this client id: 0x8E, and the will as on any loss (its
        delay lets the new connection cancel it by resuming the session), unless not `with_will`."""
        session = self.session
        self.disconnect(RC.SESSION_TAKEN_OVER)
        self.session = None  # the session now belongs to the new connection
        self._announce(False)
        if self.will is not None and with_will:
            self.broker.schedule_will(session, self.will, self.will_delay)
        self.will = None

    def will_on_close(self, send: bool) -> None:
        """Whether the will goes out when this connection closes (DISCONNECT 0x04 asks)."""
        self._send_will = send

    def apply(self, actions: Actions) -> None:
        apply(self, actions)

    def _announce(self, connected: bool) -> None:
        """Count the tenant's client and tell the hooks; service identities are not clients.
        A connection is released only if it was counted, and only once, whatever the path."""
        if self.auth.service or connected == self._counted:  # type: ignore[union-attr]  # has a session: has auth
            return
        self._counted = connected
        if connected:  # a CONNECT is billed too (common.charges.metering)
            self.broker.accounts.connected(self.tenant, self.device)
        else:
            self.broker.accounts.disconnected(self.tenant)
        self.broker.hooks.run("client.connected" if connected else "client.disconnected", self)

    def _protocol_failure(self, reason_code: int, reason: str) -> None:
        log.info("closing %s: %s (%#x)", self.peer, reason, reason_code)
        refused.malformed(self, reason_code, reason)
        if self.session is None:
            if self.reader.protocol_version == MQTT_5_0 and not self._judging:
                self.write_now(encode(Connack(False, reason_code), MQTT_5_0))
            self.close()
            return
        self.disconnect(reason_code, reason, refusal=False)

    # -- CONNECT ------------------------------------------------------------------------

    async def _handle_connect(self, connect: Connect, rest: list[Packet]) -> None:
        handshake = self.handshake
        handshake.early = rest
        self.problem_information = connect.properties.get("request_problem_information", 1) == 1
        try:
            await self._connect(connect)
        except Exception:
            log.exception("CONNECT from %s failed", self.peer)
            if not self.closing:
                self.apply(handshake.refuse(Refusal(RC.UNSPECIFIED_ERROR), connect))
            return
        finally:
            self._judging = False
        if self.closing:
            return
        try:
            early, handshake.early = handshake.early, []
            self.gate.after_read(self._process(early))  # counted in the tenant's share too
            buffered, handshake.buffered = handshake.buffered, []
            for chunk in buffered:
                self.data_received(chunk)
        except MQTTError as exc:
            self._protocol_failure(exc.reason_code, str(exc))

    async def _connect(self, connect: Connect) -> None:
        self.protocol_version = connect.protocol_version
        props = connect.properties
        if self.protocol_version == MQTT_5_0:
            self.client_receive_maximum = props.get("receive_maximum", 65535)
            self.client_maximum_packet_size = props.get("maximum_packet_size", 268_435_460)
            self._aliases.maximum = props.get("topic_alias_maximum", 0)
        result = await self.handshake.authenticate(connect)
        if isinstance(result, Refusal):
            self.apply(self.handshake.refuse(result, connect))
        if not isinstance(result, AuthResult):
            return
        self.auth = result
        self.tenant, self.device = result.tenant, result.device
        self.clean_start = connect.clean_start
        self.client_id = client_id = result.client_id or connect.client_id
        if not client_id:
            self.client_id = client_id = self.broker.assign_client_id()
        welcome = self.handshake.welcome(connect, result, client_id)
        if isinstance(welcome, Refusal):
            self.apply(self.handshake.refuse(welcome, connect))
            return
        self.will, self.will_delay = welcome.will, welcome.will_delay
        quota = result.quota
        max_queued = quota.get("max_queued_messages", self.config.max_queued_messages)
        await self.handshake.claim(client_id, connect.clean_start)  # earlier CONNECTs first
        if self.closing:
            return
        # Until CONNACK: deliveries queue in the session (as for a slow reader), writes wait.
        self.writer.hold = self.write_paused = True
        session, present = self.broker.open_session(
            self,
            self.tenant,
            client_id,
            self.device,
            connect.clean_start,
            welcome.expiry,
            max_queued,
            result.tenant_id,
        )
        self.session = session  # from here on, any exit path detaches it (connection_lost)
        session.will, session.will_delay = self.will, self.will_delay
        authorize_session(session, self.auth)
        session.queue_qos0_offline = result.queue_qos0_offline
        if session.persist is not None:
            try:
                await self.broker.persistence.save(session)  # type: ignore[union-attr]  # persist is set by it
            except Exception as exc:
                log.warning("could not persist session %s: %s", client_id, exc)
            if self.closing:  # (mypy keeps its narrowing of `closing` across the await)
                return  # type: ignore[unreachable]  # dropped while we waited: connection_lost has let the session go
        set_rates(self)
        recent = self.broker.resends.opened(self.tenant, client_id)
        self.admission.begin(result, self.protocol_version, client_id, recent)
        keep_alive, server_keep_alive = self.handshake.keep_alive(connect, quota)
        assigned = None if connect.client_id else client_id  # the thing's name too [MQTT-3.2.2-16]
        connack = self.handshake.connack(
            connect, present, welcome.expiry, assigned, server_keep_alive, quota
        )
        self.write_paused = False
        self.writer.first(connack)  # first, whatever was written meanwhile
        self._enter(State.CONNECTED)
        self.acked = True
        self.door.authenticated()
        self.timer.connected(keep_alive)
        if present:
            session.resend_inflight()
        session.pump()  # what it had queued, and what arrived while CONNECT was handled
        self._announce(True)

    # -- control plane ------------------------------------------------------------------

    def apply_policy(self, policy: Any) -> None:
        """The tenant's policy changed (`data_plane.tenancy`): re-read its quota and ACL."""
        if apply_policy(self, policy):
            set_rates(self)
