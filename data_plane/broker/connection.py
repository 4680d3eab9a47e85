"""One MQTT connection: an `asyncio.Protocol` (TCP and TLS directly; WebSocket through
`data_plane.broker.websocket`, which feeds it the same bytes).

It decodes with the sans-IO `Reader`, drives the `Broker`, and writes straight to the transport,
batching every write of one loop turn into a single `transport.write`. A slow reader pauses our
writes (`pause_writing`), which makes its session queue instead of buffering without bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from common.archive_schema import message_units
from data_plane.broker.auth import AuthResult
from data_plane.broker.broker import NEVER_EXPIRES, Broker, too_deep
from data_plane.broker.enhanced_auth import Continue, Exchange, Fail, Succeed
from data_plane.broker.message import Message
from data_plane.broker.session import Session
from data_plane.mqtt.codec import Reader, encode, encode_ack
from data_plane.mqtt.errors import MQTTError, UnsupportedProtocolVersion
from data_plane.mqtt.packets import (
    MQTT_3_1_1,
    MQTT_5_0,
    Auth,
    Connack,
    Connect,
    Disconnect,
    PacketType,
    PingReq,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from data_plane.mqtt.reason_codes import ReasonCode as RC
from data_plane.mqtt.topics import validate_topic_name
from data_plane.tenancy import identity  # identity hook: mTLS client certificates

MAX_DELAY = 4_294_967  # seconds, as EMQX

log = logging.getLogger(__name__)
RATE_KEYS = ("max_publish_rate", "max_inbound_bytes_rate", "max_outbound_bytes_rate")
# Why a connection ended, in EMQX's words (the `reason` of `$events/client_disconnected`).
DISCONNECT_REASONS = {
    RC.KEEP_ALIVE_TIMEOUT: "keepalive_timeout",
    RC.SESSION_TAKEN_OVER: "takenover",
    RC.ADMINISTRATIVE_ACTION: "kicked",
    RC.NOT_AUTHORIZED: "not_authorized",
    RC.PROTOCOL_ERROR: "protocol_error",
    RC.SERVER_SHUTTING_DOWN: "server_shutting_down",
}


class MQTTConnection(asyncio.Protocol):
    def __init__(self, broker: Broker, *, transport_name: str = "tcp") -> None:
        self.broker = broker
        self.config = broker.config
        self.transport_name = transport_name
        self.transport: asyncio.BaseTransport | Any = None
        self.reader = Reader(server_side=True, max_packet_size=broker.config.max_packet_size)
        self.protocol_version = MQTT_3_1_1
        self.peer = ""
        self.tenant = ""
        self.device = ""
        self.client_id = ""
        self.clean_start = True
        self.disconnect_reason = ""  # set by whoever ends the connection first
        self.session: Session | None = None
        self.auth: AuthResult | None = None
        self.closing = False
        self.write_paused = False
        self.outbound_bucket: Any = None  # the tenant's outbound bytes/s bucket, when limited
        self._inbound_rates: Any = None  # the tenant's TenantRates, when publishes are limited
        self._pace_timer: asyncio.TimerHandle | None = None
        self.client_receive_maximum = 65535
        self.client_maximum_packet_size = 268_435_460
        self.client_topic_alias_maximum = 0
        self.problem_information = True  # 5.0 Request Problem Information
        self._outbound_aliases: dict[str, int] = {}
        self._inbound_aliases: dict[int, str] = {}
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._burst_paused = False
        self._rate_paused = False
        self._held: list = []  # packets read but not handled while this reader is paused
        self._flush_scheduled = False
        self._keep_alive = 0.0
        self._last_received = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._will: Message | None = None
        self._will_delay = 0
        self._send_will = True
        self._connecting = False
        # From the moment the session is attached until CONNACK is written, whatever the session
        # sends waits behind it: the first packet from the server is CONNACK [MQTT-3.2.0-1].
        self._hold_writes = False
        self._acked = False  # CONNACK (success) sent
        self._counted = False  # counted in the tenant's connections: released exactly once
        self._buffered_before_connack: list[bytes] = []
        self._early: list = []  # packets read with the CONNECT, handled after CONNACK
        self._enhanced: EnhancedAuthState | None = None  # when CONNECT named a method
        self._throttled_by: set = set()
        self._rate_strikes = 0
        self._throttle_timer: asyncio.TimerHandle | None = None
        self.loop = asyncio.get_event_loop()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")
        self.broker.connections.add(self)
        if hasattr(transport, "set_write_buffer_limits"):
            transport.set_write_buffer_limits(high=self.config.write_buffer_high)
        self._timer = self.loop.call_later(self.config.connect_timeout, self._connect_timeout)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self._last_received = time.monotonic()
        if self._connecting:  # authentication in progress: hold the bytes until CONNACK
            self._buffered_before_connack.append(data)
            if self._enhanced is not None:
                self._enhanced.wake()
            return
        try:
            packets = self.reader.feed(data)
        except UnsupportedProtocolVersion:
            # Answer in the form the client can read: 3.1.1 CONNACK "unacceptable version".
            self._write_now(b"\x20\x02\x00\x01")
            self._close()
            return
        except MQTTError as exc:
            self._protocol_failure(exc.reason_code, str(exc))
            return
        if self._held:  # keep the order: what waits goes first
            self._held.extend(packets)
            return
        self._process(packets)
        if len(packets) >= self.BURST and not self._burst_paused:
            # libuv reads a busy socket many times per loop turn; yield after a burst so the
            # deliveries it produced are written before more is read (fairness, bounded batches).
            self._burst_paused = True
            self.transport.pause_reading()
            self.loop.call_soon(self._end_burst)

    BURST = 64  # packets from one read after which this connection yields a loop turn

    def _process(self, packets: list) -> None:
        for index, packet in enumerate(packets):
            if self.closing:
                return
            try:
                if packet.type is PacketType.CONNECT:
                    self._connecting = True
                    rest = packets[index + 1 :]
                    self.loop.create_task(self._handle_connect(packet, rest))
                    return
                self._handle(packet)
            except MQTTError as exc:
                self._protocol_failure(exc.reason_code, str(exc))
                return
            except Exception:
                log.exception("error handling %s from %s", packet.type.name, self.peer)
                self._protocol_failure(RC.UNSPECIFIED_ERROR, "internal error")
                return
            if self._rate_paused or self._throttled_by:
                # Paused by a quota or a backed-up subscriber: the rest of this read waits too.
                self._held.extend(packets[index + 1 :])
                return

    def _resume(self) -> None:
        """Resume reading once nothing pauses it, handling held packets first."""
        if self.closing or self._throttled_by or self._rate_paused or self._burst_paused:
            return
        if self._held:
            held, self._held = self._held, []
            self._process(held)
            if self._held or self._throttled_by or self._rate_paused:
                return
        self.transport.resume_reading()

    def _end_burst(self) -> None:
        self._burst_paused = False
        self._resume()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if not self.disconnect_reason:
            self.disconnect_reason = "tcp_closed" if exc is None else "sock_error"
        if self._timer:
            self._timer.cancel()
        if self._enhanced is not None:
            self._enhanced.wake()
        if self._pace_timer:
            self._pace_timer.cancel()
        self.broker.connections.discard(self)
        session = self.session
        if session is None:
            return
        if not self._acked:  # gone before CONNACK: never connected, so no will either
            if session.connection is self:
                session.will = None
        elif self._will is not None and self._send_will:
            self.broker.schedule_will(session, self._will, self._will_delay)
        self.broker.detach(session, self)
        self._announce(False)

    @property
    def batch_full(self) -> bool:
        """This loop turn's write batch is already large: QoS 0 waits (bounded) rather than
        growing it, since libuv may hand us many reads in one turn."""
        return self._pending_size > self.config.write_buffer_high

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        if self._hold_writes:
            return  # CONNACK not written yet: deliveries keep queueing
        self.write_paused = False
        if self.session is not None and self.session.connection is self:
            self.session.pump()

    # -- writing ------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue bytes for this loop turn's single write."""
        self._pending.append(data)
        self._pending_size += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._hold_writes:
            return  # CONNACK goes first (see _connect)
        self._pending_size = 0
        if self._pending and not self.transport.is_closing():
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending.clear()
            self.transport.write(data)
            if self.session is not None and self.session.queue and not self.write_paused:
                self.session.pump()  # QoS 0 held back while this turn's batch was full
        else:
            self._pending.clear()

    def _write_now(self, data: bytes) -> None:
        self._flush()
        if not self.transport.is_closing():
            self.transport.write(data)

    def _close(self) -> None:
        self.closing = True
        self._flush()
        self.transport.close()

    def disconnect(self, reason_code: int, reason: str = "", *, reference: str = "") -> None:
        """Server-initiated close: DISCONNECT with a reason on 5.0 after CONNACK (and where to
        go instead, for 0x9C/0x9D)."""
        if self.closing:
            return
        if not self.disconnect_reason:
            self.disconnect_reason = DISCONNECT_REASONS.get(reason_code, f"0x{reason_code:02x}")
        if self.session is not None and self.protocol_version == MQTT_5_0:
            extra = {"server_reference": reference} if reference else {}
            self.send(
                self._with_reason(
                    lambda props: encode(
                        Disconnect(reason_code, {**(props or {}), **extra}), MQTT_5_0
                    ),
                    reason,
                    always=True,
                )
            )
        self._close()

    def _with_reason(
        self, build: Callable[[dict | None], bytes], reason: str, *, always: bool = False
    ) -> bytes:
        """`build(properties)` with a Reason String where the client may receive one: not after
        Request Problem Information 0, except on CONNACK/DISCONNECT (`always`) [MQTT-3.1.2-32],
        and never growing the packet past the client's Maximum Packet Size [MQTT-3.1.2-27]
        [MQTT-3.2.2-19] [MQTT-3.4.2-2] [MQTT-3.5.2-2] [MQTT-3.14.2-3]."""
        if not reason or self.protocol_version != MQTT_5_0:
            return build(None)
        if not (always or self.problem_information):
            return build(None)
        data = build({"reason_string": reason})
        return data if len(data) <= self.client_maximum_packet_size else build(None)

    def taken_over(self) -> None:
        """Another connection claimed this client id: 0x8E, and the will as on any loss (its
        delay lets the new connection cancel it by resuming the session)."""
        session = self.session
        self.disconnect(RC.SESSION_TAKEN_OVER)
        self.session = None  # the session now belongs to the new connection
        self._announce(False)
        if self._will is not None:
            self.broker.schedule_will(session, self._will, self._will_delay)
            self._will = None

    # -- outbound pacing (the tenant's max_outbound_bytes_rate) ----------------------------

    def _set_rates(self) -> None:
        """The tenant's shared buckets, looked up once per connection and per policy change
        rather than per PUBLISH."""
        quota = self.auth.quota
        rates = None
        if any(quota.get(key) for key in RATE_KEYS):
            rates = self.broker.rates_for(self.tenant, quota)
        self._inbound_rates = rates if rates is not None and rates.limits_inbound else None
        self.outbound_bucket = rates.outbound_bytes if rates is not None else None

    def pace(self, wait: float) -> None:
        """The tenant's outbound rate is spent: pump the session again in `wait` seconds."""
        if self._pace_timer is None:  # once per pause, not per delivery held back
            self.broker.quota_exceeded(self.tenant, "outbound_rate")
            self._pace_timer = self.loop.call_later(wait, self._end_pace)

    def _end_pace(self) -> None:
        self._pace_timer = None
        if self.session is not None and self.session.connection is self:
            self.session.pump()

    def _announce(self, connected: bool) -> None:
        """Count the tenant's client and tell the hooks; service identities are not clients.
        A connection is released only if it was counted, and only once, whatever the path."""
        if self.auth.service or connected == self._counted:
            return
        self._counted = connected
        stats = self.broker.stats[self.tenant]
        stats.connected += 1 if connected else -1
        if connected:
            stats.message_units += 1  # a CONNECT is one billable message unit
        self.broker.hooks.run("client.connected" if connected else "client.disconnected", self)

    def _protocol_failure(self, reason_code: int, reason: str) -> None:
        log.info("closing %s: %s (%#x)", self.peer, reason, reason_code)
        if self.session is None:
            if self.reader.protocol_version == MQTT_5_0 and not self._connecting:
                self._write_now(encode(Connack(False, reason_code), MQTT_5_0))
            self._close()
            return
        self.disconnect(reason_code, reason)

    # -- timers -------------------------------------------------------------------------

    def _connect_timeout(self) -> None:
        if self.session is None and not self.closing:
            self._close()

    def _check_keep_alive(self) -> None:
        if self.closing:
            return
        idle = time.monotonic() - self._last_received
        limit = self._keep_alive * 1.5
        if idle >= limit:
            self.disconnect(RC.KEEP_ALIVE_TIMEOUT)
            return
        self._timer = self.loop.call_later(limit - idle, self._check_keep_alive)

    # -- CONNECT ------------------------------------------------------------------------

    async def _handle_connect(self, connect: Connect, rest: list) -> None:
        self._early = rest
        self.problem_information = connect.properties.get("request_problem_information", 1) == 1
        try:
            await self._connect(connect)
        except Exception:
            log.exception("CONNECT from %s failed", self.peer)
            if not self.closing:
                self._connack_failure(RC.UNSPECIFIED_ERROR)
            return
        finally:
            self._connecting = False
        if self.closing:
            return
        try:
            early, self._early = self._early, []
            self._process(early)
            buffered, self._buffered_before_connack = self._buffered_before_connack, []
            for chunk in buffered:
                self.data_received(chunk)
        except MQTTError as exc:
            self._protocol_failure(exc.reason_code, str(exc))

    def _connack_failure(self, reason_code: int, reason: str = "", *, reference: str = "") -> None:
        extra = {"server_reference": reference} if reference else {}
        self._write_now(
            self._with_reason(
                lambda props: encode(
                    Connack(False, reason_code, {**(props or {}), **extra}), self.protocol_version
                ),
                reason,
                always=True,
            )
        )
        self._close()

    async def _connect(self, connect: Connect) -> None:
        self.protocol_version = connect.protocol_version
        v5 = self.protocol_version == MQTT_5_0
        props = connect.properties
        if v5:
            self.client_receive_maximum = props.get("receive_maximum", 65535)
            self.client_maximum_packet_size = props.get("maximum_packet_size", 268_435_460)
            self.client_topic_alias_maximum = props.get("topic_alias_maximum", 0)
            method = props.get("authentication_method")
            if method is not None and method not in self.broker.enhanced_auth:
                self._connack_failure(RC.BAD_AUTHENTICATION_METHOD)
                return
        if not connect.client_id and not connect.clean_start and not v5:
            self._connack_failure(RC.CLIENT_IDENTIFIER_NOT_VALID)  # MQTT-3.1.3-8
            return
        if v5 and "authentication_method" in props:
            result = await self._authenticate_enhanced(connect)
            if result is None:
                return
        else:
            # identity hook: the client certificate (mTLS), if any, goes to the authenticator
            result = await identity.authenticate(
                self.broker.authenticator, connect, self.peer, self.transport
            )
        if self.closing:
            return
        if result.reason_code:
            self._connack_failure(result.reason_code, result.reason)
            return
        redirect = self.broker.redirect(connect, result) if self.broker.redirect else None
        if redirect is not None:  # MQTT 5.0 §4.11 (3.1.1: CONNACK 3, Server unavailable)
            self._connack_failure(redirect.reason_code, reference=redirect.reference if v5 else "")
            return
        quota = result.quota
        max_connections = quota.get("max_connections")
        if (
            max_connections is not None
            and not result.service
            and self.broker.connection_count(result.tenant) >= max_connections
        ):
            self.broker.quota_exceeded(result.tenant, "connections")
            self._connack_failure(RC.QUOTA_EXCEEDED, "tenant connection limit reached")
            return
        self.auth = result
        self.tenant, self.device = result.tenant, result.device
        self.clean_start = connect.clean_start
        assigned = None
        client_id = result.client_id or connect.client_id
        if not client_id:
            client_id = assigned = self.broker.assign_client_id()
        self.client_id = client_id

        if v5:
            expiry = props.get("session_expiry_interval", 0)
        else:
            expiry = 0 if connect.clean_start else NEVER_EXPIRES
        cap = quota.get("max_session_expiry")
        if cap is not None and expiry > cap and expiry != 0:
            expiry = cap  # 3.1.1 persistent sessions too: they expire once offline that long
        if connect.will is not None:
            will = connect.will
            # The will is a PUBLISH waiting to happen: the same checks, now (and when it goes).
            if too_deep(will.topic):
                self._connack_failure(RC.TOPIC_NAME_INVALID, "will topic has too many levels")
                return
            if will.topic[:1] == "$" or (
                result.acl is not None and not result.acl.can_publish(will.topic)
            ):
                self.broker.stats[result.tenant].denied += 1
                self._connack_failure(RC.NOT_AUTHORIZED, "will topic not authorized")
                return
            self._will = Message.from_publish(
                self.tenant,
                client_id,
                will.topic,
                will.payload,
                will.qos,
                will.retain,
                will.properties,
                self.device,
            )
            self._will_delay = will.properties.get("will_delay_interval", 0)

        persistent_cap = quota.get("max_persistent_sessions")
        if (
            expiry
            and persistent_cap is not None
            and not result.service
            and (self.tenant, client_id) not in self.broker.sessions
            and self.broker.persistent_count(self.tenant) >= persistent_cap
        ):
            self.broker.quota_exceeded(self.tenant, "persistent_sessions")
            self._connack_failure(RC.QUOTA_EXCEEDED, "tenant persistent session limit reached")
            return

        max_queued = quota.get("max_queued_messages", self.config.max_queued_messages)
        # Until CONNACK: deliveries queue in the session (as for a slow reader), writes wait.
        self._hold_writes = self.write_paused = True
        session, present = self.broker.open_session(
            self,
            self.tenant,
            client_id,
            self.device,
            connect.clean_start,
            expiry,
            max_queued,
            result.tenant_id,
        )
        self.session = session  # from here on, any exit path detaches it (connection_lost)
        session.will, session.will_delay = self._will, self._will_delay
        self._authorize_session(session)
        session.queue_qos0_offline = result.queue_qos0_offline
        if session.persist is not None:
            try:
                await self.broker.persistence.save(session)
            except Exception as exc:
                log.warning("could not persist session %s: %s", client_id, exc)
            if self.closing:
                return  # dropped while we waited: connection_lost has let the session go
        self._set_rates()

        keep_alive = connect.keep_alive
        server_keep_alive = None
        limit = quota.get("max_keepalive") or self.config.max_keepalive
        if limit and (keep_alive == 0 or keep_alive > limit) and v5:
            keep_alive = server_keep_alive = limit
        self._keep_alive = keep_alive

        ack_props: dict[str, Any] = {}
        if v5:
            ack_props = {
                "receive_maximum": self.config.receive_maximum,
                "topic_alias_maximum": self.config.topic_alias_maximum,
                "maximum_packet_size": self.config.max_packet_size,
                "retain_available": 1,
                "wildcard_subscription_available": 1,
                "subscription_identifier_available": 1,
                "shared_subscription_available": 1,
            }
            if assigned:
                ack_props["assigned_client_identifier"] = assigned
            if server_keep_alive is not None:
                ack_props["server_keep_alive"] = server_keep_alive
            if expiry != props.get("session_expiry_interval", 0):
                ack_props["session_expiry_interval"] = expiry
            if self._enhanced is not None:  # [MQTT-4.12.0-5]
                ack_props.update(self._enhanced.properties(self._enhanced.final_data))
        connack = encode(Connack(present, 0, ack_props), self.protocol_version)
        self._hold_writes = self.write_paused = False
        self._pending.insert(0, connack)  # first, whatever was written meanwhile
        self._pending_size += len(connack)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)
        self._acked = True
        if self._timer:
            self._timer.cancel()
            self._timer = None
        if keep_alive:
            self._timer = self.loop.call_later(keep_alive * 1.5, self._check_keep_alive)
        if present:
            session.resend_inflight()
        session.pump()  # what it had queued, and what arrived while CONNECT was handled
        self._announce(True)

    # -- enhanced authentication (MQTT 5.0 §4.12) ----------------------------------------

    async def _authenticate_enhanced(self, connect: Connect) -> AuthResult | None:
        """The AUTH exchange that completes CONNECT; None when it ended the connection."""
        name = connect.properties["authentication_method"]
        state = self._enhanced = EnhancedAuthState(name, connect, self.loop)
        exchange = self.broker.enhanced_auth[name].start(connect, self.peer)
        data = connect.properties.get("authentication_data")
        while True:
            step = await exchange.step(data)
            if self.closing:
                return None
            if isinstance(step, Fail):
                self._connack_failure(step.reason_code, step.reason)
                return None
            if isinstance(step, Succeed):
                if step.result.reason_code:
                    self._connack_failure(step.result.reason_code, step.result.reason)
                    return None
                state.final_data = step.data
                return step.result
            # Continue: AUTH 0x18 with the same method [MQTT-4.12.0-2, MQTT-4.12.0-5].
            self._write_now(state.packet(RC.CONTINUE_AUTHENTICATION, step.data))
            packet = await self._packet_before_connack()
            if packet is None:
                return None
            if packet.type is PacketType.DISCONNECT:
                self._close()
                return None
            if (
                packet.type is not PacketType.AUTH  # [MQTT-3.1.2-30]
                or packet.reason_code != RC.CONTINUE_AUTHENTICATION  # [MQTT-4.12.0-3]
                or packet.properties.get("authentication_method") != name  # [MQTT-4.12.0-5]
            ):
                self._connack_failure(RC.PROTOCOL_ERROR, "expected AUTH 0x18 with the same method")
                return None
            data = packet.properties.get("authentication_data")

    async def _packet_before_connack(self) -> Any:
        """The client's next packet while CONNECT is unanswered (None if the connection ends)."""
        state = self._enhanced
        while not self.closing:
            if not self._early and self._buffered_before_connack:
                chunks, self._buffered_before_connack = self._buffered_before_connack, []
                try:
                    for chunk in chunks:
                        self._early.extend(self.reader.feed(chunk))
                except MQTTError as exc:
                    self._connack_failure(exc.reason_code, str(exc))
                    return None
            if self._early:
                return self._early.pop(0)
            await state.wait()
        return None

    def _reauthenticate(self, packet: Auth) -> None:
        """AUTH after CONNACK: re-authentication [MQTT-4.12.1]; other traffic flows meanwhile."""
        state = self._enhanced
        if state is None:  # no method in CONNECT: the client must not send AUTH [MQTT-4.12.0-7]
            self.disconnect(RC.PROTOCOL_ERROR, "AUTH without an authentication method in CONNECT")
            return
        if packet.properties.get("authentication_method") != state.method:  # [MQTT-4.12.1-1]
            self.disconnect(RC.PROTOCOL_ERROR, "re-authentication must use the CONNECT's method")
            return
        expected = RC.RE_AUTHENTICATE if state.exchange is None else RC.CONTINUE_AUTHENTICATION
        if packet.reason_code != expected or state.busy:
            self.disconnect(RC.PROTOCOL_ERROR, f"expected AUTH {expected:#04x}")
            return
        if state.exchange is None:
            state.exchange = self.broker.enhanced_auth[state.method].start(state.connect, self.peer)
        state.busy = True
        step = state.exchange.step(packet.properties.get("authentication_data"))
        self.loop.create_task(self._reauthentication_step(state.exchange, step))

    async def _reauthentication_step(self, exchange: Exchange, pending: Any) -> None:
        state = self._enhanced
        try:
            step = await pending
        except Exception:
            log.exception("re-authentication of %s failed", self.peer)
            step = Fail(RC.UNSPECIFIED_ERROR, "internal error")
        state.busy = False
        if self.closing or state.exchange is not exchange:
            return
        if isinstance(step, Continue):
            self.send(state.packet(RC.CONTINUE_AUTHENTICATION, step.data))
            return
        state.exchange = None
        if isinstance(step, Succeed) and (
            step.result.reason_code == 0
            and (step.result.tenant, step.result.device) == (self.tenant, self.device)
        ):
            self.send(state.packet(0, step.data))
            return
        # The identity may not change on a live connection; 0x86 is no DISCONNECT code.
        code = step.reason_code if isinstance(step, Fail) else RC.NOT_AUTHORIZED
        if code == RC.BAD_USER_NAME_OR_PASSWORD:
            code = RC.NOT_AUTHORIZED
        self.disconnect(code, step.reason if isinstance(step, Fail) else "identity changed")

    # -- packets after CONNECT ----------------------------------------------------------

    def _handle(self, packet: Any) -> None:
        kind = packet.type
        if kind is PacketType.PUBLISH:
            self._publish(packet)
        elif kind is PacketType.PUBACK:
            delivery = self.session.puback(packet.packet_id)
            if delivery is not None:
                self.broker.settled(self.session, delivery)
                self.broker.hooks.run("message.acked", self.session, delivery)
        elif kind is PacketType.PUBREC:
            failed = packet.reason_code >= 0x80
            delivery = self.session.pubrec(packet.packet_id, failed)
            if delivery is not None:
                if failed:
                    self.broker.settled(self.session, delivery)
                elif delivery.seq is not None and self.session.durable is not None:
                    commit = self.session.durable.released(self.session, delivery, packet.packet_id)
                    self.loop.create_task(self._after_commit(commit, PacketType.PUBREL, packet))
                else:
                    self._send_ack(PacketType.PUBREL, packet.packet_id)
            elif not failed:
                self.send(
                    encode_ack(
                        PacketType.PUBREL,
                        packet.packet_id,
                        RC.PACKET_IDENTIFIER_NOT_FOUND,
                        None,
                        self.protocol_version,
                    )
                )
        elif kind is PacketType.PUBREL:
            known = packet.packet_id in self.session.inbound_qos2
            self.session.inbound_qos2.discard(packet.packet_id)
            if known and self.session.durable is not None:
                # Released in the database before PUBCOMP: the client may reuse the id after.
                commit = self.session.durable.inbound_qos2(self.session, packet.packet_id, False)
                self.loop.create_task(self._after_commit(commit, PacketType.PUBCOMP, packet))
            else:
                code = 0 if known else RC.PACKET_IDENTIFIER_NOT_FOUND
                self._send_ack(PacketType.PUBCOMP, packet.packet_id, code)
        elif kind is PacketType.PUBCOMP:
            delivery = self.session.pubcomp(packet.packet_id)
            if delivery is not None:
                self.broker.settled(self.session, delivery)
                self.broker.hooks.run("message.acked", self.session, delivery)
        elif kind is PacketType.SUBSCRIBE:
            self._subscribe(packet)
        elif kind is PacketType.UNSUBSCRIBE:
            self._unsubscribe(packet)
        elif kind is PacketType.PINGREQ:
            self.send(b"\xd0\x00")
        elif kind is PacketType.DISCONNECT:
            self._disconnect(packet)
        elif kind is PacketType.AUTH:
            self._reauthenticate(packet)

    def _publish(self, packet: Publish) -> None:
        v5 = self.protocol_version == MQTT_5_0
        topic = packet.topic
        if v5 and "topic_alias" in packet.properties:
            alias = packet.properties["topic_alias"]
            if alias > self.config.topic_alias_maximum:
                self.disconnect(RC.TOPIC_ALIAS_INVALID)
                return
            if topic:
                self._inbound_aliases[alias] = topic
            else:
                topic = self._inbound_aliases.get(alias, "")
                if not topic:
                    self.disconnect(RC.PROTOCOL_ERROR, "unknown topic alias")
                    return
        qos = packet.qos
        if qos == 2:
            if packet.packet_id in self.session.inbound_qos2:
                # A resent QoS 2 PUBLISH we already took: acknowledge, don't deliver twice.
                self.send(
                    encode_ack(PacketType.PUBREC, packet.packet_id, 0, None, self.protocol_version)
                )
                return
            if len(self.session.inbound_qos2) >= self.config.receive_maximum:
                self.disconnect(RC.RECEIVE_MAXIMUM_EXCEEDED)
                return
        quota = self.auth.quota
        max_size = quota.get("max_message_size")
        if max_size is not None and len(packet.payload) > max_size:
            # 0x95 is a DISCONNECT code (PUBACK cannot carry it); 3.1.1 drops it silently.
            self.broker.quota_exceeded(self.tenant, "message_size")
            if v5:
                self.broker.stats[self.tenant].dropped += 1
                self.disconnect(RC.PACKET_TOO_LARGE, f"message larger than {max_size} bytes")
            else:
                self._refuse_publish(packet, 0, "")
            return
        if self._inbound_rates is not None:
            wait = self._inbound_rates.admit(len(packet.payload))
            if wait:
                self.broker.quota_exceeded(self.tenant, "publish_rate")
                if not v5:
                    # 3.1.1 has no way to say it: stop reading, and try this one again then.
                    self.transport.pause_reading()
                    self._rate_paused = True
                    self._held.insert(0, packet)
                    self.loop.call_later(min(wait, 5.0), self._resume_after_rate_limit)
                    return
                else:
                    self._rate_strikes += 1
                    self.broker.stats[self.tenant].rate_limited += 1
                    if self._rate_strikes >= self.RATE_STRIKES_BEFORE_DISCONNECT:
                        self.disconnect(RC.MESSAGE_RATE_TOO_HIGH, "publish rate quota exceeded")
                    else:
                        # PUBACK/PUBREC cannot carry 0x96 (a DISCONNECT code): Quota exceeded.
                        self._refuse_publish(packet, RC.QUOTA_EXCEEDED, "rate quota")
                    return
            else:
                self._rate_strikes = 0
        delay = None
        if topic.startswith("$delayed/"):
            seconds, _, real_topic = topic[len("$delayed/") :].partition("/")
            try:
                validate_topic_name(real_topic)
                delay = int(seconds) if seconds.isdigit() else -1
            except MQTTError:
                delay = -1
            if not 0 <= delay <= MAX_DELAY or real_topic.startswith("$"):
                self._refuse_publish(
                    packet, RC.TOPIC_NAME_INVALID, "use $delayed/{seconds}/{topic}"
                )
                return
            topic = real_topic
        if too_deep(topic):
            self._refuse_publish(packet, RC.TOPIC_NAME_INVALID, "topic has too many levels")
            return
        acl = self.auth.acl
        if topic.startswith("$") or (acl is not None and not acl.can_publish(topic)):
            self.broker.stats[self.tenant].denied += 1
            self._refuse_publish(packet, RC.NOT_AUTHORIZED, "not authorized")
            return
        message = Message.from_publish(
            self.tenant,
            self.client_id,
            topic,
            packet.payload,
            qos,
            packet.retain,
            packet.properties if v5 else {},
            self.device,
        )
        if packet.retain and not packet.payload:
            pass  # clearing is always allowed
        elif packet.retain:
            limit = quota.get("max_retained_messages")
            if (
                limit is not None
                and self.broker.retained.count(self.tenant) >= limit
                and not self.broker.retained.has(self.tenant, topic)
            ):
                self.broker.quota_exceeded(self.tenant, "retained")
                self._refuse_publish(packet, RC.QUOTA_EXCEEDED, "retained message limit")
                return
        if delay is not None:
            stored = self.broker.delay(message, delay)
            commits = [stored] if stored is not None else []
            if qos == 2:
                self._hold_qos2(packet.packet_id, commits)
            if commits and qos:
                self.loop.create_task(self._ack_after_commit(packet, 0, commits))
            elif qos:
                self._ack_publish(packet, 0)
            return
        self.broker.publishing_connection = self
        try:
            reached = self.broker.publish(message)
        finally:
            self.broker.publishing_connection = None
        commits = self.broker.take_pending_commits()
        code = 0 if reached or not v5 else RC.NO_MATCHING_SUBSCRIBERS
        if qos == 0:
            return
        if qos == 2:
            self._hold_qos2(packet.packet_id, commits)
        if commits:
            # Acknowledge only once every durable copy is committed (group commit).
            self.loop.create_task(self._ack_after_commit(packet, code, commits))
        else:
            self._ack_publish(packet, code)

    def _hold_qos2(self, packet_id: int, commits: list) -> None:
        """Remember a QoS 2 packet id until PUBREL; a persistent session commits it with the
        message's durable copies, so a resend after a crash is recognised."""
        self.session.inbound_qos2.add(packet_id)
        if self.session.durable is not None:
            commits.append(self.session.durable.inbound_qos2(self.session, packet_id, True))

    def _send_ack(self, kind: PacketType, packet_id: int, code: int = 0) -> None:
        self.send(encode_ack(kind, packet_id, code, None, self.protocol_version))

    async def _after_commit(self, commit: asyncio.Future, kind: PacketType, packet: Any) -> None:
        """PUBREL/PUBCOMP once the QoS 2 state change is durable; if the database refused it,
        close: the client resends after reconnecting and nothing is delivered twice."""
        try:
            await commit
        except Exception as exc:
            log.warning("QoS 2 state not stored (%s); closing %s", exc, self.client_id)
            if not self.closing:
                self._close()
            return
        if not self.closing:
            self._send_ack(kind, packet.packet_id)

    def _ack_publish(self, packet: Publish, code: int, reason: str = "") -> None:
        kind = PacketType.PUBACK if packet.qos == 1 else PacketType.PUBREC
        if not reason:  # once per QoS 1/2 PUBLISH: no closure, no property decisions
            self.send(encode_ack(kind, packet.packet_id, code, None, self.protocol_version))
            return
        self.send(
            self._with_reason(
                lambda props: encode_ack(
                    kind, packet.packet_id, code, props, self.protocol_version
                ),
                reason,
            )
        )

    async def _ack_after_commit(self, packet: Publish, code: int, commits: list) -> None:
        results = await asyncio.gather(*commits, return_exceptions=True)
        if self.closing:
            return
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is None:
            self._ack_publish(packet, code)
        elif self.protocol_version == MQTT_5_0:
            if packet.qos == 2:
                self.session.inbound_qos2.discard(packet.packet_id)
            self._ack_publish(packet, RC.UNSPECIFIED_ERROR, "persistent storage unavailable")
        else:
            self._close()  # 3.1.1 cannot say it: no PUBACK, the client will resend

    RATE_STRIKES_BEFORE_DISCONNECT = 100  # consecutive refusals: the excess is sustained

    def _resume_after_rate_limit(self) -> None:
        self._rate_paused = False
        self._resume()

    def _refuse_publish(self, packet: Publish, code: int, reason: str) -> None:
        """5.0: negative acknowledgement; 3.1.1 has none, so acknowledge and drop (allowed)."""
        self.broker.stats[self.tenant].dropped += 1
        if packet.qos == 0:
            return
        self._ack_publish(packet, code if self.protocol_version == MQTT_5_0 else 0, reason)

    def _subscribe(self, packet: Subscribe) -> None:
        v5 = self.protocol_version == MQTT_5_0
        ids = packet.properties.get("subscription_identifier") or [None]
        subscription_id = ids[0]
        acl = self.auth.acl
        limit = self.auth.quota.get("max_subscriptions_per_client")
        codes = []
        granted = []
        for sub in packet.subscriptions:
            if too_deep(sub.topic_filter):
                codes.append(RC.TOPIC_FILTER_INVALID)
                continue
            if acl is not None and not acl.can_subscribe(sub.topic_filter):
                self.broker.stats[self.tenant].denied += 1
                codes.append(RC.NOT_AUTHORIZED)
                continue
            if (
                limit is not None
                and sub.topic_filter not in self.session.subscriptions
                and len(self.session.subscriptions) >= limit
            ):
                self.broker.quota_exceeded(self.tenant, "subscriptions")
                codes.append(RC.QUOTA_EXCEEDED)
                continue
            codes.append(sub.qos)
            granted.append(sub)
        self.send(encode(SubAck(packet.packet_id, codes), self.protocol_version))
        if not self.auth.service:  # a SUBSCRIBE is billed per 5 KiB of its filters
            size = sum(len(sub.topic_filter) for sub in packet.subscriptions)
            self.broker.stats[self.tenant].message_units += message_units(size)
        for sub in granted:
            self.broker.subscribe(self.session, sub, subscription_id if v5 else None)
        if granted and self.session.persist is not None:
            self.broker.persistence.save_later(self.session)

    def _unsubscribe(self, packet: Unsubscribe) -> None:
        codes = [
            0 if self.broker.unsubscribe(self.session, f) else RC.NO_SUBSCRIPTION_EXISTED
            for f in packet.topic_filters
        ]
        self.send(encode(UnsubAck(packet.packet_id, codes), self.protocol_version))
        if self.session.persist is not None:
            self.broker.persistence.save_later(self.session)

    def _disconnect(self, packet: Disconnect) -> None:
        if self.protocol_version == MQTT_5_0:
            expiry = packet.properties.get("session_expiry_interval")
            if expiry is not None:
                if self.session.expiry_interval == 0 and expiry != 0:
                    self.disconnect(RC.PROTOCOL_ERROR, "session expiry was 0 at CONNECT")
                    return
                self.session.expiry_interval = expiry
                self.broker.track_persistent(self.session)
        # Normal disconnection discards the will; 0x04 asks for it to be sent.
        self._send_will = packet.reason_code == RC.DISCONNECT_WITH_WILL
        self.disconnect_reason = "normal"
        if not self._send_will:
            self.session.will = None
        self._close()

    # -- back-pressure from subscribers ------------------------------------------------

    THROTTLE_LIMIT = 2.0  # seconds a backed-up subscriber may hold a publisher

    def throttle_by(self, session: Any) -> None:
        if self.closing:
            return
        if not self._throttled_by:
            self.transport.pause_reading()
            self._throttle_timer = self.loop.call_later(self.THROTTLE_LIMIT, self._throttle_expired)
        self._throttled_by.add(session)

    def _throttle_expired(self) -> None:
        """The subscribers that held us for the whole allowance are not draining: they stop
        holding publishers (their queues fill to their limit and drop) until they drain."""
        self._throttle_timer = None
        for session in self._throttled_by:
            session.stalled = True
            session.blocked_publishers.discard(self)
        self._unthrottle_all()

    def unthrottle_by(self, session: Any) -> None:
        self._throttled_by.discard(session)
        if not self._throttled_by:
            self._unthrottle_all()

    def _unthrottle_all(self) -> None:
        self._throttled_by.clear()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        self._resume()

    # -- outbound topic aliases ---------------------------------------------------------

    def outbound_alias(self, topic: str) -> tuple[int, bool] | None:
        """(alias, already known by the client) or None when aliases are not in use."""
        if not self.client_topic_alias_maximum:
            return None
        alias = self._outbound_aliases.get(topic)
        if alias is not None:
            return alias, True
        if len(self._outbound_aliases) >= self.client_topic_alias_maximum:
            return None
        alias = len(self._outbound_aliases) + 1
        self._outbound_aliases[topic] = alias
        return alias, False

    # -- control plane ------------------------------------------------------------------

    def apply_policy(self, policy: Any) -> None:
        if self.auth is None or self.auth.service:
            return
        from data_plane.tenancy.acl import AclPolicy

        self.auth.quota = dict(policy.quota)
        self.auth.queue_qos0_offline = policy.queue_qos0_offline
        if self.session is not None:
            self.session.queue_qos0_offline = policy.queue_qos0_offline
        self._set_rates()
        self.auth.acl = AclPolicy(
            policy.acl,
            tenant=self.tenant,
            device=self.device,
            default_allow=policy.acl_default_allow,
        )
        if self.session is not None and self.session.connection is self:
            self._authorize_session(self.session)

    def _authorize_session(self, session: Session) -> None:
        """What the session needs of this connection's rights: the read filter for deliveries,
        and the ACL and quota its will is judged by when it goes out."""
        acl = self.auth.acl
        session.acl = acl
        session.quota = self.auth.quota
        session.read_filter = acl.can_receive if getattr(acl, "filters_reads", False) else None
        if session.read_filter is not None:
            session.withhold(session.read_filter)


__all__ = ["MQTTConnection", "PubAck", "PubComp", "PubRec", "PubRel", "PingReq"]


class EnhancedAuthState:
    """A connection's enhanced authentication: its method, the CONNECT it answers for (the
    identity on re-authentication), the exchange in progress and the wait for the next AUTH."""

    __slots__ = ("method", "connect", "exchange", "busy", "final_data", "_waiter", "_loop")

    def __init__(self, method: str, connect: Connect, loop: asyncio.AbstractEventLoop) -> None:
        self.method, self.connect, self._loop = method, connect, loop
        self.exchange: Exchange | None = None  # a re-authentication in progress
        self.busy = False  # a step is being judged: the client must wait for our answer
        self.final_data: bytes | None = None  # for CONNACK
        self._waiter: asyncio.Future | None = None

    def properties(self, data: bytes | None) -> dict[str, Any]:
        """The method (always, [MQTT-4.12.0-5]) and the data, if any."""
        props: dict[str, Any] = {"authentication_method": self.method}
        if data:
            props["authentication_data"] = data
        return props

    def packet(self, reason_code: int, data: bytes | None) -> bytes:
        return encode(Auth(reason_code, self.properties(data)), MQTT_5_0)

    async def wait(self) -> None:
        self._waiter = self._loop.create_future()
        await self._waiter
        self._waiter = None

    def wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
