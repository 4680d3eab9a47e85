"""Replay from a time (issue 45): N archived messages served to a `$replay` subscriber, beside
Mosquitto draining a backlog of the same N to a returning client, in one run.

    .venv/bin/python -m bench.replay [--messages 1000000] [--payload json|filler] [--qos 0]

Ours: `runbroker` on Postgres as operators run it (archive, journey, metering, ACL rules and
quotas: `bench.archive`'s seeding, and a history policy on `#`). A publisher sends N messages
of 256 bytes (device-like JSON) with nobody subscribed; once the archive has them, a client
subscribes to `$replay/1h/bench/pairs/#` and receives them. Mosquitto has no replay: its
nearest equivalent is a persistent session's backlog of N (3.1.1 clean session 0), drained when
its client comes back — the same messages through the same client code.

Reported: messages/s served (SUBSCRIBE or reconnect to the last message) and messages/s per core
of broker CPU over that time (the target: ≥ 50,000), with how many arrived. The broker runs
pinned to one core, the load generator on the other.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from bench import archive, brokers
from bench.brokers import RunningBroker
from bench.group_drain import PAYLOAD, TOPIC, WINDOW, _bye, _client, _subscribe, each_broker
from bench.limiter import with_recorder
from bench.loadgen import PublishTemplate, Stats, json_bodies


async def _publish(port: int, login: tuple[str, str], messages: int, qos: int, bodies) -> None:
    stats = Stats()
    client = await _client(port, stats, "replay-pub", login, True)
    template = PublishTemplate(TOPIC, PAYLOAD, qos, bodies)
    client.max_inflight, packet_id = WINDOW, 0
    while stats.sent < messages:
        if qos:
            if client.inflight >= WINDOW:
                client.window.clear()
                await client.window.wait()
            count = min(WINDOW - client.inflight, messages - stats.sent)
            client.inflight += count
        else:
            count = min(64, messages - stats.sent)
            if not client.writable.is_set():
                await client.writable.wait()
        batch = []
        for _ in range(count):
            packet_id = packet_id % 65535 + 1
            batch.append(template.packet(packet_id))
        stats.sent += count
        client.transport.write(b"".join(batch))
        if not qos:
            await asyncio.sleep(0)
    while qos and stats.acked < messages:
        await asyncio.sleep(0.01)
    await _bye(client)


async def one(broker: RunningBroker, login, messages: int, qos: int, bodies) -> dict:
    ours = broker.name != "mosquitto"
    if not ours:  # the backlog's session first
        member = await _client(broker.port, Stats(), "replayer", login, False)
        await _subscribe(member, "bench/pairs/#")
        await _bye(member)
    await _publish(broker.port, login, messages, qos, bodies)
    if ours:
        await asyncio.sleep(3)  # the archive's segments are written (the replay waits too)
    stats = Stats()
    cpu, started = broker.cpu_seconds(), time.perf_counter()
    client = await _client(broker.port, stats, "replayer", login, ours)
    if ours:
        await _subscribe(client, "$replay/1h/bench/pairs/#")
    deadline = started + max(60.0, messages / 2000)
    last, seen = time.perf_counter(), 0
    while stats.received < messages and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
        if stats.received != seen:
            seen, last = stats.received, time.perf_counter()
        elif time.perf_counter() - last > 5:
            break  # QoS 0 a publisher's flood may have lost some: what came is what counts
    served = last - started
    cpu = broker.cpu_seconds() - cpu
    await _bye(client)
    return {
        "served_per_s": stats.received / served if served else 0.0,
        "per_core": stats.received / cpu if cpu else 0.0,
        "received": stats.received,
    }


async def run(messages: int, payload: str, qos: int, login: tuple[str, str]) -> list[str]:
    bodies = json_bodies(PAYLOAD) if payload == "json" else None
    lines = [
        f"{messages:,} messages of {PAYLOAD} B ({payload}), QoS {qos}; "
        f"load average at start {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)"
    ]
    measured = await each_broker(
        messages, login, lambda broker, who: one(broker, who, messages, qos, bodies)
    )
    for name, result in measured:
        label = "replay" if name == "ours" else "backlog"
        lines.append(
            f"  {name:<9} {label} {result['served_per_s']:>9,.0f} msg/s, "
            f"{result['per_core']:>9,.0f} msg/s per core of broker CPU | received "
            f"{result['received']:,} of {messages:,}"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--payload", choices=("json", "filler"), default="json")
    parser.add_argument("--qos", type=int, choices=(0, 1), default=1)
    args = parser.parse_args(argv)
    with_recorder(brokers.REPO)
    slugs, creds = archive.seed(1)
    archive.keep_everything(slugs)
    archive.manage("set_quota", slugs[0], f"max_queued_messages={args.messages}")
    try:
        print("\n".join(asyncio.run(run(args.messages, args.payload, args.qos, creds[0]))))
    finally:
        archive.cleanup(slugs)


if __name__ == "__main__":
    main()
