"""A load generator that speaks MQTT 3.1.1 itself: pre-encoded packets, raw asyncio Protocols on
uvloop, minimal parsing (fixed header, packet id, an 8-byte send timestamp in each payload), so
the generator is not what limits the broker under test."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from common.mqtt.properties import encode_varint

_ids = itertools.count(1)


def _string(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw


def whole_packets(buffer: bytearray) -> Iterator[tuple[int, int, int]]:
    """(first byte, start of the variable header, end) of each whole MQTT packet at the front of
    `buffer`, in order; the packets taken are cut from `buffer` when the iteration ends (a packet
    still arriving stays). For the benchmarks' light clients; `Client` keeps its own tuned loop."""
    position, size = 0, len(buffer)
    try:
        while size - position >= 2:
            length, shift, index = 0, 0, position + 1
            while True:
                if index >= size:
                    return
                byte = buffer[index]
                index += 1
                length |= (byte & 0x7F) << shift
                if not byte & 0x80:
                    break
                shift += 7
            end = index + length
            if end > size:
                return
            yield buffer[position], index, end
            position = end
    finally:
        if position:
            del buffer[:position]


def connect_packet(
    client_id: str, username: str | None, password: str | None, keep_alive: int = 120
) -> bytes:
    flags = 0x02 | (0x80 if username else 0) | (0x40 if password else 0)
    body = _string("MQTT") + bytes((4, flags)) + keep_alive.to_bytes(2, "big") + _string(client_id)
    if username:
        body += _string(username)
    if password:
        body += _string(password)
    return b"\x10" + encode_varint(len(body)) + body


def subscribe_packet(topic: str, qos: int, packet_id: int = 1) -> bytes:
    body = packet_id.to_bytes(2, "big") + _string(topic) + bytes((qos,))
    return b"\x82" + encode_varint(len(body)) + body


class PublishTemplate:
    """PUBLISH bytes for one topic and size; only the timestamp and packet id change, and with
    `bodies` the rest of the payload, taken in turn from them (each `size - 8` bytes long, such
    as `json_bodies`: what devices send, where `x`s compress to nothing)."""

    def __init__(
        self, topic: str, size: int, qos: int, bodies: list[bytes] | None = None, start: int = 0
    ) -> None:
        self.qos = qos
        self.topic = _string(topic)
        self.bodies = bodies or [b"x" * max(0, size - 8)]
        if any(len(body) != len(self.bodies[0]) for body in self.bodies):
            raise ValueError("every payload body has the same size")
        self._next = start % len(self.bodies)
        self.header = bytes((0x30 | (qos << 1),)) + encode_varint(
            len(self.topic) + (2 if qos else 0) + 8 + len(self.bodies[0])
        )

    def packet(self, packet_id: int = 0) -> bytes:
        stamp = struct.pack(">d", time.perf_counter())
        pid = packet_id.to_bytes(2, "big") if self.qos else b""
        body = self.bodies[self._next]
        self._next = (self._next + 1) % len(self.bodies)
        return b"".join((self.header, self.topic, pid, stamp, body))


def json_bodies(size: int, count: int = 4096, seed: int = 14) -> list[bytes]:
    """`count` payload bodies of `size - 8` bytes cut from device telemetry (JSON readings with
    varied numbers; LZ4 compresses them about 3.8:1), for benchmarks where payload content
    matters (the archive compresses payloads)."""
    random_ = random.Random(seed)
    bodies = []
    for seq in range(count):
        readings = []
        text = b""
        while len(text) < size:
            readings.append(
                {
                    "sensor": f"{random_.choice(SENSORS)}-{random_.randrange(16)}",
                    "value": round(random_.uniform(-40, 1200), random_.randrange(1, 5)),
                    "status": random_.choice(["ok", "ok", "ok", "warn"]),
                }
            )
            body = {"device": f"sensor-{seq % 997:04d}", "seq": seq, "readings": readings}
            text = json.dumps(body, separators=(",", ":")).encode()
        bodies.append(text[: max(0, size - 8)])
    return bodies


SENSORS = ["temp", "humidity", "pressure", "co2", "vibration"]


@dataclass
class Stats:
    sent: int = 0
    acked: int = 0
    received: int = 0
    latencies: list[float] = field(default_factory=list)
    sample_every: int = 1

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


class Client(asyncio.Protocol):
    """One MQTT connection: publisher, subscriber, or idle."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.connack = asyncio.get_event_loop().create_future()
        self.suback: asyncio.Future | None = None
        self.window = asyncio.Event()
        self.window.set()
        self.inflight = 0
        self.max_inflight = 0
        self.writable = asyncio.Event()
        self.writable.set()
        self.closed = asyncio.get_event_loop().create_future()
        self._acks: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)
        if not self.connack.done():
            self.connack.set_exception(ConnectionError("closed before CONNACK"))

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        position = 0
        size = len(buffer)
        stats = self.stats
        now = time.perf_counter()
        while size - position >= 2:
            first = buffer[position]
            length = 0
            shift = 0
            index = position + 1
            while True:
                if index >= size:
                    break
                byte = buffer[index]
                index += 1
                length |= (byte & 0x7F) << shift
                if not byte & 0x80:
                    break
                shift += 7
            else:
                break
            if index >= size and (buffer[index - 1] & 0x80):
                break
            end = index + length
            if end > size:
                break
            kind = first >> 4
            if kind == 3:  # PUBLISH: topic, [packet id], 8-byte stamp, filler
                topic_len = (buffer[index] << 8) | buffer[index + 1]
                at = index + 2 + topic_len
                qos = (first >> 1) & 3
                if qos:
                    self._acks.append(b"\x40\x02" + bytes(buffer[at : at + 2]))
                    at += 2
                stats.received += 1
                if stats.received % stats.sample_every == 0 and end - at >= 8:
                    (sent_at,) = struct.unpack_from(">d", buffer, at)
                    stats.latencies.append(now - sent_at)
            elif kind == 4:  # PUBACK for our QoS 1 publish
                stats.acked += 1
                self.inflight -= 1
                if self.inflight < self.max_inflight:
                    self.window.set()
            elif kind == 2 and not self.connack.done():
                if buffer[index + 1] == 0:
                    self.connack.set_result(True)
                else:
                    self.connack.set_exception(ConnectionError(f"CONNACK {buffer[index + 1]}"))
            elif kind == 9 and self.suback is not None and not self.suback.done():
                self.suback.set_result(bytes(buffer[index + 2 : end]))
            position = end
        if position:
            del buffer[:position]
        if self._acks:
            self.transport.write(b"".join(self._acks))
            self._acks.clear()

    async def subscribe(self, topic: str, qos: int) -> None:
        self.suback = asyncio.get_running_loop().create_future()
        self.transport.write(subscribe_packet(topic, qos))
        codes = await asyncio.wait_for(self.suback, 30)
        if codes[:1] == b"\x80":
            raise ConnectionError(f"subscription to {topic} refused")


async def connect(
    host: str, port: int, stats: Stats, client_id: str, username: str | None, password: str | None
) -> Client:
    loop = asyncio.get_running_loop()
    _, client = await loop.create_connection(lambda: Client(stats), host, port)
    client.transport.write(connect_packet(client_id, username, password))
    await asyncio.wait_for(client.connack, 30)
    return client


async def connect_many(
    count: int,
    host: str,
    port: int,
    stats: Stats,
    prefix: str,
    username: str | None,
    password: str | None,
    parallel: int = 200,
    logins: list[tuple[str, str]] | None = None,
) -> list[Client]:
    """`count` clients; with `logins`, client i logs in as `logins[i % len(logins)]` (devices of
    several tenants), else all as `username`."""
    gate = asyncio.Semaphore(parallel)

    async def one(index: int) -> Client:
        user, secret = logins[index % len(logins)] if logins else (username, password)
        async with gate:
            return await connect(host, port, stats, f"{prefix}-{index}-{next(_ids)}", user, secret)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def publish_flat_out(
    client: Client, template: PublishTemplate, deadline: float, stats: Stats, window: int
) -> None:
    """QoS 0: write while the transport accepts; QoS 1: keep `window` unacknowledged."""
    client.max_inflight = window
    packet_id = 0
    transport = client.transport
    while time.perf_counter() < deadline and not transport.is_closing():
        if not client.writable.is_set():
            await client.writable.wait()
        if template.qos:
            if client.inflight >= window:
                client.window.clear()
                try:
                    await asyncio.wait_for(client.window.wait(), 1)
                except TimeoutError:
                    continue
            batch = []
            for _ in range(window - client.inflight):
                packet_id = packet_id % 65535 + 1
                batch.append(template.packet(packet_id))
            client.inflight += len(batch)
            stats.sent += len(batch)
            transport.write(b"".join(batch))
        else:
            transport.write(b"".join(template.packet() for _ in range(16)))
            stats.sent += 16
            await asyncio.sleep(0)


async def publish_at_rate(
    clients: list[Client], templates: list[PublishTemplate], rate: int, seconds: float, stats: Stats
) -> None:
    """QoS 0 at a fixed total `rate` (msg/s) for `seconds`, round robin over the clients (client
    i publishes `templates[i]`), in ticks of 10 ms so the rate holds without a timer per
    message."""
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    started = next_at = time.perf_counter()
    index, n = 0, len(clients)
    while time.perf_counter() - started < seconds:
        for _ in range(per_tick):
            clients[index % n].transport.write(templates[index % n].packet())
            stats.sent += 1
            index += 1
        next_at += tick
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))


def close_all(clients: list[Client]) -> None:
    for client in clients:
        if client.transport is not None and not client.transport.is_closing():
            client.transport.write(b"\xe0\x00")
            client.transport.close()
