"""A durable shared group's backlog, kept and drained (issue 45), beside Mosquitto in one run.

    .venv/bin/python -m bench.group_drain [--messages 200000] [--payload json|filler]

Ours: `runbroker` on Postgres as operators run it (archive, journey, metering, ACL rules and
quotas: `bench.archive`'s seeding). A member subscribes to `$share/bench/bench/pairs/#` and
leaves (its clean session ends: the group has no member); a publisher sends N QoS 1 messages
of 256 bytes (device-like JSON), each acknowledged once the group has stored it; then a new
member subscribes and acknowledges everything it gets. Mosquitto has no durable groups: its
nearest equivalent is a persistent session's backlog (3.1.1 clean session 0, queue N), drained
when its client comes back — the same messages through the same client code.

Reported per broker: messages/s kept (publish to last PUBACK), messages/s drained (SUBSCRIBE or
reconnect to the last message), and the broker's CPU per drained message as msg/s per core
(messages ÷ broker CPU seconds during the drain; the target: ≥ 20,000). The broker runs pinned
to one core, the load generator on the other.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from bench import archive, brokers
from bench.brokers import RunningBroker
from bench.limiter import start_runbroker, with_recorder
from bench.loadgen import (
    Client,
    PublishTemplate,
    Stats,
    _string,
    json_bodies,
    subscribe_packet,
)
from common.mqtt.properties import encode_varint

TOPIC = "bench/pairs/drain"
PAYLOAD = 256
WINDOW = 200  # QoS 1 publishes in flight


def _connect_packet(client_id: str, username: str, password: str, clean: bool) -> bytes:
    flags = (0x02 if clean else 0) | 0xC0
    body = _string("MQTT") + bytes((4, flags)) + (120).to_bytes(2, "big") + _string(client_id)
    body += _string(username) + _string(password)
    return b"\x10" + encode_varint(len(body)) + body


async def _client(port: int, stats: Stats, client_id: str, login: tuple[str, str], clean: bool):
    loop = asyncio.get_running_loop()
    _, client = await loop.create_connection(lambda: Client(stats), "127.0.0.1", port)
    client.transport.write(_connect_packet(client_id, *login, clean))
    await asyncio.wait_for(client.connack, 30)
    return client


async def _subscribe(client: Client, topic: str) -> None:
    client.suback = asyncio.get_running_loop().create_future()
    client.transport.write(subscribe_packet(topic, 1))
    codes = await asyncio.wait_for(client.suback, 30)
    if codes[:1] != b"\x01":
        raise RuntimeError(f"SUBSCRIBE {topic}: {codes!r}")


async def _bye(client: Client) -> None:
    client.transport.write(b"\xe0\x00")  # DISCONNECT
    await asyncio.wait_for(client.closed, 10)


async def _publish(port: int, login: tuple[str, str], messages: int, bodies) -> float:
    """N QoS 1 publishes, `WINDOW` in flight; seconds until the last PUBACK."""
    stats = Stats()
    client = await _client(port, stats, "drain-pub", login, True)
    template = PublishTemplate(TOPIC, PAYLOAD, 1, bodies)
    client.max_inflight = WINDOW
    started, packet_id = time.perf_counter(), 0
    while stats.sent < messages:
        if client.inflight >= WINDOW:
            client.window.clear()
            await client.window.wait()
        count = min(WINDOW - client.inflight, messages - stats.sent)
        batch = []
        for _ in range(count):
            packet_id = packet_id % 65535 + 1
            batch.append(template.packet(packet_id))
        client.inflight += count
        stats.sent += count
        client.transport.write(b"".join(batch))
    while stats.acked < messages:
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    await _bye(client)
    return elapsed


async def one(broker: RunningBroker, login: tuple[str, str], messages: int, bodies) -> dict:
    shared = broker.name != "mosquitto"
    topic = "$share/bench/bench/pairs/#" if shared else "bench/pairs/#"
    clean = shared  # ours: a group's clean member; Mosquitto: a persistent session
    member = await _client(broker.port, Stats(), "drain-member", login, clean)
    await _subscribe(member, topic)
    await _bye(member)
    kept = await _publish(broker.port, login, messages, bodies)
    stats = Stats()
    cpu, started = broker.cpu_seconds(), time.perf_counter()
    member = await _client(broker.port, stats, "drain-member", login, clean)
    if shared:
        await _subscribe(member, topic)
    deadline = started + max(60.0, messages / 2000)
    while stats.received < messages and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    drained = time.perf_counter() - started
    cpu = broker.cpu_seconds() - cpu
    await asyncio.sleep(0.5)  # the last acknowledgements reach it
    await _bye(member)
    return {
        "kept_per_s": messages / kept,
        "drained_per_s": stats.received / drained,
        "per_core": stats.received / cpu if cpu else 0.0,
        "received": stats.received,
    }


async def each_broker(messages: int, login: tuple[str, str], measure) -> list[tuple[str, dict]]:
    """`await measure(broker, login)` on ours (`runbroker`, a scratch object store of its own)
    and on Mosquitto (its queue `messages` long): (name, result) each."""
    stores = archive.Stores("file")
    results = []
    try:
        for name in ("ours", "mosquitto"):
            if name == "ours":
                broker, who = start_runbroker(brokers.REPO, stores.new()), login
            else:
                broker = brokers.start("mosquitto", max_queued=messages)
                who = (brokers.USERNAME, brokers.PASSWORD)
            try:
                results.append((name, await measure(broker, who)))
            finally:
                broker.stop()
    finally:
        stores.close()
    return results


async def run(messages: int, payload: str, login: tuple[str, str]) -> list[str]:
    bodies = json_bodies(PAYLOAD) if payload == "json" else None
    lines = [
        f"{messages:,} QoS 1 messages of {PAYLOAD} B ({payload}); "
        f"load average at start {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)"
    ]
    measured = await each_broker(
        messages, login, lambda broker, who: one(broker, who, messages, bodies)
    )
    for name, result in measured:
        lines.append(
            f"  {name:<9} kept {result['kept_per_s']:>9,.0f} msg/s | drained "
            f"{result['drained_per_s']:>9,.0f} msg/s, {result['per_core']:>9,.0f} msg/s per "
            f"core of broker CPU | received {result['received']:,} of {messages:,}"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--payload", choices=("json", "filler"), default="json")
    args = parser.parse_args(argv)
    with_recorder(brokers.REPO)
    slugs, creds = archive.seed(1)
    archive.manage(
        "set_quota",
        slugs[0],
        f"max_group_messages={args.messages}",
        f"max_group_bytes={args.messages * 1024}",
        f"max_queued_messages={args.messages}",
    )
    try:
        print("\n".join(asyncio.run(run(args.messages, args.payload, creds[0]))))
    finally:
        archive.cleanup(slugs)


if __name__ == "__main__":
    main()
