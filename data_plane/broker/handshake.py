"""CONNECT until CONNACK, and enhanced authentication (MQTT 5.0 §4.12) after it.

`Handshake.authenticate` answers a CONNECT with the client's `AuthResult` (who it is, may it come
in now) or a `Refusal` (the CONNACK reason); `Handshake.welcome` decides the rest of the session's
terms (client id, expiry, will) or refuses. The connection acts on them: it opens the session,
writes CONNACK or the refusal, and closes. The handshake never writes CONNACK itself; it only
speaks AUTH (0x18 challenges) and, after CONNACK, answers re-authentication.

While a CONNECT is being judged the connection reads nothing: the packets that came with it
(`early`) and the bytes that arrive meanwhile (`buffered`) wait here; an enhanced-auth exchange
takes the client's AUTH answers from them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from common.mqtt.codec import Reader, encode
from common.mqtt.errors import MQTTError
from common.mqtt.packets import MQTT_5_0, Auth, Connack, Connect, Packet, PacketType
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker import limits, refused
from data_plane.broker.accounting import Accounts
from data_plane.broker.acks import PacketBuilder
from data_plane.broker.actions import Actions, Close, Disconnect, Renewed, Send, SendNow
from data_plane.broker.auth import Authenticator, AuthResult, elsewhere
from data_plane.broker.enhanced_auth import (
    Continue,
    EnhancedAuthState,
    Exchange,
    Fail,
    Method,
    Step,
    Succeed,
)
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.broker.ports import Cluster
from data_plane.broker.session import Session
from data_plane.broker.stats import Redirect
from data_plane.config import BrokerConfig

log = logging.getLogger(__name__)

CONNACK_WAIT = 2.0  # seconds a CONNECT waits for an earlier one of its client id to be answered


class HandshakeBroker(Protocol):
    """What the handshake asks of the broker (`broker.Broker`): who may come in, and whether
    the tenant's limits leave room; it changes nothing there but the counts of a refusal. A
    session's connection is a `ports.Outlet`: its `answered` is what `claim` awaits."""

    authenticator: Authenticator
    enhanced_auth: dict[str, Method]
    redirect: Callable[[Connect, AuthResult], Redirect | None] | None
    cluster: Cluster | None
    sessions: dict[tuple[str, str], Session]
    accounts: Accounts
    hooks: Hooks  # `refused` tells them

    def connection_count(self, tenant: str) -> int: ...
    def persistent_count(self, tenant: str) -> int: ...


class HandshakeOutlet(Protocol):
    """What the handshake needs of its connection: what it knows (read only), and `apply` for
    what the handshake decided while it waits (AUTH challenges, the end of the connection)."""

    @property
    def broker(self) -> HandshakeBroker: ...
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def peer(self) -> str: ...
    @property
    def reader(self) -> Reader: ...
    @property
    def closing(self) -> bool: ...
    @property
    def tenant(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    # Done once CONNACK is written or the connection closes.
    @property
    def answered(self) -> asyncio.Future[None]: ...
    @property
    def peer_certificate(self) -> tuple[bytes, ...] | None: ...  # a TLS client's chain (DER)
    @property
    def transport(self) -> object: ...  # (its TLS object says the endpoint the client named)

    def apply(self, actions: Actions) -> None: ...

    def with_reason(self, build: PacketBuilder, reason: str, *, always: bool = False) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Refusal:
    """CONNACK with this reason code, then close; `quota`/`counts`: what to count for `tenant`."""

    reason_code: int
    reason: str = ""
    reference: str = ""  # Server Reference (5.0 redirects)
    tenant: str = ""
    quota: str | None = None
    counts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Welcome:
    """The session's terms once the client is in."""

    expiry: int
    will: Message | None
    will_delay: int


class Handshake:
    def __init__(self, conn: HandshakeOutlet) -> None:
        self.conn = conn
        self.early: list[Packet] = []  # packets read with the CONNECT, handled after CONNACK
        self.buffered: list[bytes] = []  # bytes that arrived while CONNECT was judged
        self.enhanced: EnhancedAuthState | None = None  # when CONNECT named a method

    # -- CONNECT --------------------------------------------------------------------------

    async def authenticate(self, connect: Connect) -> AuthResult | Refusal | None:
        """Who the client is and whether it may come in now; None when the connection ended
        meanwhile (nothing more to say)."""
        conn, broker = self.conn, self.conn.broker
        v5 = connect.protocol_version == MQTT_5_0
        props = connect.properties
        if v5:
            method = props.get("authentication_method")
            if method is not None and method not in broker.enhanced_auth:
                return Refusal(RC.BAD_AUTHENTICATION_METHOD)
        if not connect.client_id and not connect.clean_start and not v5:
            return Refusal(RC.CLIENT_IDENTIFIER_NOT_VALID)  # MQTT-3.1.3-8
        if (why := limits.client_id_refused(connect.client_id)) is not None:
            return Refusal(RC.CLIENT_IDENTIFIER_NOT_VALID, why)
        if v5 and "authentication_method" in props:
            result = await self._exchange(connect)
            if not isinstance(result, AuthResult):
                return result
        elif conn.peer_certificate and getattr(broker.authenticator, "accepts_certificates", False):
            result = await broker.authenticator.authenticate(
                connect, conn.peer, certificate=conn.peer_certificate
            )
        else:
            result = await broker.authenticator.authenticate(connect, conn.peer)
        if conn.closing:
            return None
        if result.reason_code:  # the tenant, when it exists: whose refusal operators see
            return Refusal(result.reason_code, result.reason, tenant=result.tenant or "")
        if (outside := elsewhere(conn.transport, result)) is not None:  # another's endpoint
            return Refusal(RC.NOT_AUTHORIZED, outside, tenant=result.tenant)
        redirect = broker.redirect(connect, result) if broker.redirect else None
        if redirect is not None:  # MQTT 5.0 §4.11 (3.1.1: CONNACK 3, Server unavailable)
            return Refusal(redirect.reason_code, reference=redirect.reference if v5 else "")
        if result.budget_degraded and not result.service:  # spend control (tenants/budgets/)
            return Refusal(
                RC.QUOTA_EXCEEDED, "monthly budget reached", tenant=result.tenant, quota="budget"
            )
        limit = result.quota.get("max_connections")
        if limit is not None and not result.service:
            if broker.cluster is None:
                code = RC.QUOTA_EXCEEDED if broker.connection_count(result.tenant) >= limit else 0
            else:  # counted over every node, exactly (data_plane.cluster.limits)
                code = await broker.cluster.admit_connection(conn, result.tenant, limit)
                if conn.closing:  # (mypy keeps its narrowing of `closing` across the await)
                    return None  # type: ignore[unreachable]  # its place goes back with the cluster's next sweep
            if code == RC.SERVER_UNAVAILABLE:
                return Refusal(code, "cluster bus unavailable", tenant=result.tenant)
            if code:
                return Refusal(
                    RC.QUOTA_EXCEEDED,
                    "tenant connection limit reached",
                    tenant=result.tenant,
                    quota="connections",
                )
        return result

    async def claim(self, client_id: str, clean_start: bool) -> None:
        """Make the client id this connection's before its session opens: the cluster moves it
        here from another node, and an earlier CONNECT of the id on this node that has not had
        its CONNACK yet (its session's first save stands between the two) is answered first.
        Taken over before its CONNACK, that client got DISCONNECT 0x8E without one, which
        clients count as a failed connect and retry. Awaits the earlier connection's `answered`
        (or this one's end), `CONNACK_WAIT` at most; looks again after, as the session may have
        passed to yet another connection meanwhile."""
        conn = self.conn
        broker = conn.broker
        if broker.cluster is not None:
            await broker.cluster.claim(conn.tenant, client_id, clean_start)
        deadline = conn.loop.time() + CONNACK_WAIT
        this: object = conn  # the connection, which is its session's Outlet too
        while not conn.answered.done():
            session = broker.sessions.get((conn.tenant, client_id))
            earlier = session.connection if session is not None else None
            left = deadline - conn.loop.time()
            if earlier is None or earlier is this or earlier.answered.done() or left <= 0:
                return
            await asyncio.wait(
                (earlier.answered, conn.answered),
                timeout=left,
                return_when=asyncio.FIRST_COMPLETED,
            )

    def welcome(self, connect: Connect, result: AuthResult, client_id: str) -> Welcome | Refusal:
        """The session's expiry (capped by the tenant's quota) and will (judged as a PUBLISH,
        now), or why the client may not have them."""
        broker = self.conn.broker
        tenant, quota = result.tenant, result.quota
        if connect.protocol_version == MQTT_5_0:
            expiry = connect.properties.get("session_expiry_interval", 0)
        else:
            expiry = 0 if connect.clean_start else limits.NEVER_EXPIRES
        cap = quota.get("max_session_expiry")
        if cap is not None and expiry > cap and expiry != 0:
            expiry = cap  # 3.1.1 persistent sessions too: they expire once offline that long
        will_message, will_delay = None, 0
        if connect.will is not None:
            will = connect.will
            # The will is a PUBLISH waiting to happen: the same checks, now (and when it goes).
            if limits.too_deep(will.topic):
                return Refusal(RC.TOPIC_NAME_INVALID, "will topic has too many levels")
            if will.topic[:1] == "$" or (
                result.acl is not None and not result.acl.can_publish(will.topic)
            ):
                return Refusal(
                    RC.NOT_AUTHORIZED,
                    "will topic not authorized",
                    tenant=tenant,
                    counts=("denied",),
                )
            will_message = Message.from_publish(
                tenant,
                client_id,
                will.topic,
                will.payload,
                will.qos,
                will.retain,
                will.properties,
                result.device,
            )
            will_delay = will.properties.get("will_delay_interval", 0)
        persistent_cap = quota.get("max_persistent_sessions")
        if (
            expiry
            and persistent_cap is not None
            and not result.service
            and (tenant, client_id) not in broker.sessions
            and broker.persistent_count(tenant) >= persistent_cap
        ):
            return Refusal(
                RC.QUOTA_EXCEEDED,
                "tenant persistent session limit reached",
                tenant=tenant,
                quota="persistent_sessions",
            )
        return Welcome(expiry, will_message, will_delay)

    def refuse(self, refusal: Refusal, connect: Connect) -> Actions:
        """Told (`refused`) and counted for its tenant: CONNACK with the refusal's reason code
        (and Server Reference), then close."""
        refused.connect(self.conn, refusal, connect)
        if refusal.tenant:
            self.conn.broker.accounts.refused(refusal.tenant, refusal.quota, refusal.counts)
        return SendNow(self.refusal_connack(refusal, connect.protocol_version)), Close()

    def refusal_connack(self, refusal: Refusal, version: int) -> bytes:
        """CONNACK with the refusal's reason code (a Reason String where the client may take
        one, and the Server Reference of a redirect)."""
        extra = {"server_reference": refusal.reference} if refusal.reference else {}
        return self.conn.with_reason(
            lambda props: encode(
                Connack(False, refusal.reason_code, {**(props or {}), **extra}), version
            ),
            refusal.reason,
            always=True,
        )

    def keep_alive(self, connect: Connect, quota: dict[str, int]) -> tuple[int, int | None]:
        """(keep alive in force, Server Keep Alive to announce or None): the tenant's or the
        broker's limit replaces a longer or absent one (5.0 only can say so)."""
        keep_alive = connect.keep_alive
        limit = quota.get("max_keepalive") or self.conn.config.max_keepalive
        if (
            limit
            and (keep_alive == 0 or keep_alive > limit)
            and connect.protocol_version == MQTT_5_0
        ):
            return limit, limit
        return keep_alive, None

    def connack(
        self,
        connect: Connect,
        present: bool,
        expiry: int,
        assigned: str | None,
        server_keep_alive: int | None,
        quota: Mapping[str, int],
    ) -> bytes:
        """The successful CONNACK: what this broker offers (5.0) and what it changed."""
        ack_props: dict[str, object] = {}
        if connect.protocol_version == MQTT_5_0:
            config = self.conn.config
            ack_props = {
                "receive_maximum": config.receive_maximum,
                "topic_alias_maximum": config.topic_alias_maximum,
                "maximum_packet_size": limits.maximum_packet_size(config.max_packet_size, quota),
                "retain_available": 1,
                "wildcard_subscription_available": 1,
                "subscription_identifier_available": 1,
                "shared_subscription_available": 1,
            }
            if assigned:
                ack_props["assigned_client_identifier"] = assigned
            if server_keep_alive is not None:
                ack_props["server_keep_alive"] = server_keep_alive
            if expiry != connect.properties.get("session_expiry_interval", 0):
                ack_props["session_expiry_interval"] = expiry
            if self.enhanced is not None:  # [MQTT-4.12.0-5]
                ack_props.update(self.enhanced.properties(self.enhanced.final_data))
        return encode(Connack(present, 0, ack_props), connect.protocol_version)

    # -- while CONNECT is judged -----------------------------------------------------------

    def buffer(self, data: bytes) -> None:
        """Bytes that arrived while CONNECT is judged: kept in order for after CONNACK (or for
        the enhanced-auth exchange waiting on the client's next AUTH)."""
        self.buffered.append(data)
        self.wake()

    def wake(self) -> None:
        if self.enhanced is not None:
            self.enhanced.wake()

    async def _exchange(self, connect: Connect) -> AuthResult | Refusal | None:
        """The AUTH exchange that completes CONNECT."""
        conn = self.conn
        name = connect.properties["authentication_method"]
        state = self.enhanced = EnhancedAuthState(name, connect, conn.loop)
        exchange = conn.broker.enhanced_auth[name].start(connect, conn.peer)
        data = connect.properties.get("authentication_data")
        while True:
            step = await exchange.step(data)
            if conn.closing:
                return None
            if isinstance(step, Fail):
                return Refusal(step.reason_code, step.reason)
            if isinstance(step, Succeed):
                if step.result.reason_code:
                    return Refusal(step.result.reason_code, step.result.reason)
                state.final_data = step.data
                return step.result
            # Continue: AUTH 0x18 with the same method [MQTT-4.12.0-2, MQTT-4.12.0-5].
            conn.apply(SendNow(state.packet(RC.CONTINUE_AUTHENTICATION, step.data)))
            packet = await self._packet_before_connack()
            if isinstance(packet, Refusal) or packet is None:
                return packet
            if packet.type is PacketType.DISCONNECT:
                conn.apply(Close())
                return None
            if (
                not isinstance(packet, Auth)  # [MQTT-3.1.2-30]
                or packet.reason_code != RC.CONTINUE_AUTHENTICATION  # [MQTT-4.12.0-3]
                or packet.properties.get("authentication_method") != name  # [MQTT-4.12.0-5]
            ):
                return Refusal(RC.PROTOCOL_ERROR, "expected AUTH 0x18 with the same method")
            data = packet.properties.get("authentication_data")

    async def _packet_before_connack(self) -> Packet | Refusal | None:
        """The client's next packet while CONNECT is unanswered (None if the connection ends)."""
        conn = self.conn
        state: EnhancedAuthState = self.enhanced  # type: ignore[assignment]  # in an exchange
        while not conn.closing:
            if not self.early and self.buffered:
                chunks, self.buffered = self.buffered, []
                try:
                    for chunk in chunks:
                        self.early.extend(conn.reader.feed(chunk))
                except MQTTError as exc:
                    return Refusal(exc.reason_code, str(exc))
            if self.early:
                return self.early.pop(0)
            await state.wait()
        return None

    # -- re-authentication (after CONNACK) ---------------------------------------------------

    def reauthenticate(self, packet: Auth) -> Actions:
        """AUTH after CONNACK: re-authentication [MQTT-4.12.1]; other traffic flows meanwhile.
        A protocol error is returned at once; the exchange's answer is applied when it comes."""
        conn, state = self.conn, self.enhanced
        if state is None:  # no method in CONNECT: the client must not send AUTH [MQTT-4.12.0-7]
            return Disconnect(RC.PROTOCOL_ERROR, "AUTH without an authentication method in CONNECT")
        if packet.properties.get("authentication_method") != state.method:  # [MQTT-4.12.1-1]
            return Disconnect(RC.PROTOCOL_ERROR, "re-authentication must use the CONNECT's method")
        expected = RC.RE_AUTHENTICATE if state.exchange is None else RC.CONTINUE_AUTHENTICATION
        if packet.reason_code != expected or state.busy:
            return Disconnect(RC.PROTOCOL_ERROR, f"expected AUTH {expected:#04x}")
        if state.exchange is None:
            state.exchange = conn.broker.enhanced_auth[state.method].start(state.connect, conn.peer)
        state.busy = True
        step = state.exchange.step(packet.properties.get("authentication_data"))
        conn.loop.create_task(self._apply_later(self.reauthenticated(state.exchange, step)))
        return None

    async def _apply_later(self, decided: Awaitable[Actions]) -> None:
        actions = await decided
        if not self.conn.closing:
            self.conn.apply(actions)

    async def reauthenticated(self, exchange: Exchange, pending: Awaitable[Step]) -> Actions:
        """What the exchange's next step means: AUTH 0x18 again, AUTH 0x00 (the connection
        holds the secret it proved), or DISCONNECT (the identity may not change)."""
        state = self.enhanced
        assert state is not None  # (an exchange runs only where CONNECT named a method)
        try:
            step = await pending
        except Exception:
            log.exception("re-authentication of %s failed", self.conn.peer)
            step = Fail(RC.UNSPECIFIED_ERROR, "internal error")
        state.busy = False
        if state.exchange is not exchange:
            return None
        if isinstance(step, Continue):
            return Send(state.packet(RC.CONTINUE_AUTHENTICATION, step.data))
        state.exchange = None
        conn = self.conn
        if isinstance(step, Succeed) and (
            step.result.reason_code == 0
            and (step.result.tenant, step.result.device) == (conn.tenant, conn.device)
        ):
            result = step.result
            renewed = Renewed(result.credential_id, result.credential_expires_at)
            return renewed, Send(state.packet(0, step.data))
        # The identity may not change on a live connection; 0x86 is no DISCONNECT code.
        code = step.reason_code if isinstance(step, Fail) else RC.NOT_AUTHORIZED
        if code == RC.BAD_USER_NAME_OR_PASSWORD:
            code = RC.NOT_AUTHORIZED
        return Disconnect(code, step.reason if isinstance(step, Fail) else "identity changed")
