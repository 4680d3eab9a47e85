"""One rule's republish connection, on the action lanes' event loop (`lanes.py`).

MQTT 5 over asyncio streams with the shared codec (`common.mqtt`), as the tenant-scoped service
identity `{tenant}/$rules` (client id `$rules-{rule id}-…`, token `common.security.service_token`).

Built to be slowed, never to pile up: the broker applies the tenant's publish rate to this
connection by not reading it (TCP back-pressure), and `drain()` then waits, so the socket buffer
holds at most the transport's high-water mark; QoS 1/2 messages wait for a place in the window
the broker granted (Receive Maximum, at most `MAX_INFLIGHT`). What waits meanwhile is the
lane's bounded queue, and only this rule's task waits: other rules and tenants go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time

from common.mqtt.codec import Reader, encode
from common.mqtt.packets import (
    MQTT_5_0,
    Connack,
    Connect,
    Disconnect,
    PacketType,
    PingReq,
    Publish,
    PubRel,
)
from common.security import service_token

MAX_INFLIGHT = 32
KEEP_ALIVE = 30
TOKEN_TTL = 6 * 3600
CONNECT_TIMEOUT = 5.0
WRITE_BUFFER = 64 << 10  # what the transport holds before drain() waits


class PublishFailed(ConnectionError):
    """The message did not reach the broker (refused, connection lost): worth another try."""


class PublishRefused(PublishFailed):
    """The broker answered the message with a failure reason code. `final` unless the code says
    "later" (0x89 server busy, 0x96 message rate too high, 0x97 quota exceeded)."""

    LATER = (0x89, 0x96, 0x97)

    def __init__(self, code: int) -> None:
        self.code = code
        self.final = code not in self.LATER
        super().__init__(f"the broker refused the message (reason code 0x{code:02X})")


class RulePublisher:
    def __init__(self, host: str, port: int, key: bytes, tenant: str, client_prefix: str) -> None:
        self.host, self.port, self.key = host, port, key
        self.tenant, self.client_prefix = tenant, client_prefix
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.renew_at = 0.0
        self.window = asyncio.Semaphore(MAX_INFLIGHT)
        self.waiting: dict[int, asyncio.Future] = {}
        self.next_id = 0
        self.receiver: asyncio.Task | None = None
        self.pinger: asyncio.Task | None = None
        self.lock = asyncio.Lock()
        self.closed = False

    @property
    def connected(self) -> bool:
        return self.writer is not None and not self.writer.is_closing()

    async def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        """Send one message; returns once the broker has it (QoS 1/2: acknowledged)."""
        if self.closed:
            raise PublishFailed("closed")
        await self._connection()
        if qos == 0:
            await self._send(Publish(topic, payload, 0, retain))
            return
        async with self.window:
            packet_id = self._packet_id()
            done = asyncio.get_running_loop().create_future()
            self.waiting[packet_id] = done
            try:
                await self._send(Publish(topic, payload, qos, retain, packet_id=packet_id))
                code = await done
            finally:
                self.waiting.pop(packet_id, None)
        if code >= 0x80:
            raise PublishRefused(code)

    async def close(self) -> None:
        self.closed = True
        if self.connected:
            with contextlib.suppress(Exception):
                self.writer.write(encode(Disconnect(), MQTT_5_0))
        await self._drop("closed")

    # -- connection ---------------------------------------------------------------------------

    async def _connection(self) -> None:
        async with self.lock:
            if self.connected and time.monotonic() < self.renew_at:
                return
            if self.connected:  # the token is checked at CONNECT only: renew before it expires
                await self._drop("renewed")
            await self._connect()

    async def _connect(self) -> None:
        client_id = self.client_prefix + secrets.token_hex(6)
        token = service_token.sign(self.key, self.tenant, client_id, ttl=TOKEN_TTL)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                reader, writer = await asyncio.open_connection(self.host, self.port)
                writer.transport.set_write_buffer_limits(high=WRITE_BUFFER)
                writer.write(
                    encode(
                        Connect(
                            client_id,
                            protocol_version=MQTT_5_0,
                            keep_alive=KEEP_ALIVE,
                            username=f"{self.tenant}/{service_token.RULES_DEVICE}",
                            password=token.encode(),
                        ),
                        MQTT_5_0,
                    )
                )
                await writer.drain()
                decoder = Reader(server_side=False, protocol_version=MQTT_5_0)
                connack = None
                while connack is None:
                    data = await reader.read(4096)
                    if not data:
                        raise PublishFailed("the broker closed the connection at CONNECT")
                    for packet in decoder.feed(data):
                        if isinstance(packet, Connack):
                            connack = packet
        except TimeoutError:
            raise PublishFailed("no CONNACK from the broker") from None
        except OSError as exc:
            raise PublishFailed(
                f"no broker at {self.host}:{self.port} (MQTT_INTERNAL_HOST, MQTT_INTERNAL_PORT):"
                f" {exc.strerror or exc}"
            ) from None
        if connack.reason_code >= 0x80:
            writer.close()
            raise PublishFailed(f"broker refused the rules identity (0x{connack.reason_code:02X})")
        granted = int(connack.properties.get("receive_maximum", MAX_INFLIGHT) or MAX_INFLIGHT)
        self.window = asyncio.Semaphore(max(1, min(MAX_INFLIGHT, granted)))
        self.reader, self.writer = reader, writer
        self.renew_at = time.monotonic() + TOKEN_TTL / 2
        self.receiver = asyncio.create_task(self._receive(decoder))
        self.pinger = asyncio.create_task(self._ping())

    async def _send(self, packet) -> None:
        writer = self.writer
        if writer is None or writer.is_closing():
            raise PublishFailed("the connection to the broker is gone")
        try:
            writer.write(encode(packet, MQTT_5_0))
            await writer.drain()  # waits while the broker does not read us: slowed, bounded
        except (OSError, RuntimeError) as exc:
            await self._drop(str(exc))
            raise PublishFailed(f"the connection to the broker broke: {exc}") from None

    async def _receive(self, decoder: Reader) -> None:
        reader = self.reader
        reason = "the broker closed the connection"
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                for packet in decoder.feed(data):
                    await self._handle(packet)
        except asyncio.CancelledError:
            return
        except Exception as exc:
            reason = f"the connection to the broker broke: {exc}"
        await self._drop(reason)

    async def _handle(self, packet) -> None:
        kind = packet.type
        if kind is PacketType.PUBACK or kind is PacketType.PUBCOMP:
            self._settle(packet.packet_id, packet.reason_code)
        elif kind is PacketType.PUBREC:
            if packet.reason_code >= 0x80:
                self._settle(packet.packet_id, packet.reason_code)
            else:
                await self._send(PubRel(packet.packet_id))
        elif kind is PacketType.DISCONNECT:
            await self._drop(f"the broker disconnected it (0x{packet.reason_code:02X})")

    def _settle(self, packet_id: int, code: int) -> None:
        done = self.waiting.get(packet_id)
        if done is not None and not done.done():
            done.set_result(code)

    async def _ping(self) -> None:
        with contextlib.suppress(asyncio.CancelledError, PublishFailed):
            while True:
                await asyncio.sleep(KEEP_ALIVE / 2)
                await self._send(PingReq())

    async def _drop(self, reason: str) -> None:
        writer, self.writer, self.reader = self.writer, None, None
        current = asyncio.current_task()
        for task in (self.receiver, self.pinger):
            if task is not None and task is not current and not task.done():
                task.cancel()
        if writer is not None:
            writer.close()
        for done in self.waiting.values():
            if not done.done():
                done.set_exception(PublishFailed(reason))
        self.waiting.clear()

    def _packet_id(self) -> int:
        for _ in range(65535):
            self.next_id = self.next_id % 65535 + 1
            if self.next_id not in self.waiting:
                return self.next_id
        raise PublishFailed("no packet id free")
