"""Device shadow updates with delta fan-out, on the broker as operators run it (issue 32).

    .venv/bin/python -m bench.shadows [--things 100] [--window 10] [--seconds 5] [--rate R]

The broker is `python manage.py runbroker` on Postgres (the embedded cluster, or DATABASE_URL)
with its defaults (metering and the archive on), pinned to core 0, the generator on core 1 (it
speaks MQTT 3.1.1 itself, as `bench.loadgen`). Each of `--things` devices (one tenant, made with
the services the API uses) connects as itself, subscribes to its own
`$aws/things/{thing}/shadow/update/{accepted,rejected,delta}` and updates its own shadow's desired state with a new
value each time, so every update is accepted and sends it a delta; its `clientToken` carries the
send time, which the delta echoes: latency is update sent → delta received.

Two runs: flat out (each thing keeps `--window` updates in flight, AWS's limit per connection
being 10): updates/s accepted (deltas received per second) and the batch sizes; then a fixed rate
(`--rate`, default half the flat-out figure) for the latency: p50, p99, max. Targets (issue 32):
≥ 5,000 updates/s per broker worker, p99 ≤ 20 ms at half that rate. Postgres and broker CPU
seconds are reported beside them (both share the machine with the generator).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench import brokers
from bench.loadgen import _string, connect_packet, subscribe_packet, whole_packets
from common.mqtt.properties import encode_varint

PASSWORD = "bench-shadows-password-0123456789"


def seed(things: int) -> tuple[str, list[str]]:
    """A scratch tenant with `things` devices (high quotas: the bench measures shadows, not
    the plan's limits)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from tenants.devices import services as device_services
    from tenants.tenant import services as tenant_services

    slug = f"bench-sh-{uuid.uuid4().hex[:6]}"
    tenant = tenant_services.tenant_create(slug)
    tenant_services.tenant_set_quota(
        tenant,
        {
            "max_connections": 100_000,
            "max_publish_rate": 10_000_000,
            "max_inbound_bytes_rate": 2_000_000_000,
            "max_outbound_bytes_rate": 2_000_000_000,
        },
    )
    names = [f"thing-{n:04d}" for n in range(things)]
    for name in names:
        device_services.device_create(tenant=tenant, name=name, password=PASSWORD)
    return slug, names


def postgres_cpu_seconds() -> float:
    """CPU of the embedded cluster's postmaster and its children (other clusters on a shared
    machine, such as other checkouts' test databases, are not counted); 0 with DATABASE_URL."""
    from common.runtime import embedded

    pid_file = embedded.postgres_dir() / "cluster" / "postmaster.pid"
    if os.environ.get("DATABASE_URL") or not pid_file.exists():
        return 0.0
    postmaster = pid_file.read_text().split()[0]
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat.parent.name == postmaster or fields[1] == postmaster:  # itself, or its child
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def cleanup(slug: str) -> None:
    from tenants.models import Tenant

    Tenant.objects.filter(slug=slug).delete()


def start_runbroker() -> brokers.RunningBroker:
    workdir = Path(tempfile.mkdtemp(prefix="bench-shadows-"))
    port = brokers._free_port()
    cmd = [sys.executable, "manage.py", "runbroker", "--port", str(port), "--ws-port", "0"]
    env = {**os.environ, "OBJECT_STORE_URL": f"file://{workdir / 'objects'}"}
    process = subprocess.Popen(
        brokers._pinned(cmd),
        cwd=brokers.REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "stderr.log", "w"),
        preexec_fn=brokers._raise_nofile,
    )
    brokers._wait_port(process, port, "runbroker")
    return brokers.RunningBroker("runbroker", process, port, workdir)


class Thing(asyncio.Protocol):
    """One device: its updates out (`clientToken` = send time), its deltas in."""

    def __init__(self, name: str, latencies: list[float]) -> None:
        self.name = name
        self.latencies = latencies
        self.topic = _string(f"$aws/things/{name}/shadow/update")
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.ready = asyncio.get_event_loop().create_future()
        self.in_flight = 0
        self.window = asyncio.Event()
        self.sent = self.deltas = self.rejected = self.accepted = 0
        self.value = 0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def update(self) -> None:
        self.value += 1
        stamp = repr(time.perf_counter())
        body = b'{"state":{"desired":{"v":%d}},"clientToken":"%s"}' % (self.value, stamp.encode())
        packet = self.topic + body
        self.transport.write(b"\x30" + encode_varint(len(packet)) + packet)
        self.in_flight += 1
        self.sent += 1

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        now = time.perf_counter()
        for first, index, end in whole_packets(buffer):
            kind = first >> 4
            if kind == 3:
                topic_len = (buffer[index] << 8) | buffer[index + 1]
                at = index + 2 + topic_len
                if first & 0x06:  # QoS 1: acknowledge
                    self.transport.write(b"\x40\x02" + bytes(buffer[at : at + 2]))
                    at += 2
                topic = bytes(buffer[index + 2 : index + 2 + topic_len])
                payload = bytes(buffer[at:end])
                if topic.endswith(b"/delta"):  # the fan-out: timed
                    self.deltas += 1
                    token = payload.find(b'"clientToken":"')
                    if token >= 0:
                        start = token + 15
                        sent_at = float(payload[start : payload.index(b'"', start)])
                        self.latencies.append(now - sent_at)
                else:  # accepted or rejected: the request is answered
                    if topic.endswith(b"/rejected"):
                        self.rejected += 1
                    else:
                        self.accepted += 1
                    self.in_flight -= 1
                    self.window.set()
            elif kind == 2 and not self.ready.done():
                self.ready.set_result(buffer[index + 1] == 0)
            elif kind == 9 and not self.ready.done():  # SUBACK
                self.ready.set_result(buffer[index + 2] != 0x80)


async def connect_things(port: int, slug: str, names: list[str]) -> list[Thing]:
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    things = []
    for name in names:
        _, thing = await loop.create_connection(
            lambda n=name: Thing(n, latencies), "127.0.0.1", port
        )
        thing.transport.write(connect_packet(name, f"{slug}/{name}", PASSWORD))
        if not await asyncio.wait_for(thing.ready, 30):
            raise ConnectionError(f"{name}: CONNACK refused")
        for reply in ("accepted", "rejected", "delta"):
            thing.ready = loop.create_future()
            thing.transport.write(subscribe_packet(f"$aws/things/{name}/shadow/update/{reply}", 0))
            if not await asyncio.wait_for(thing.ready, 30):
                raise ConnectionError(f"{name}: subscription to its {reply} refused")
        things.append(thing)
    return things


async def flat_out(things: list[Thing], window: int, seconds: float) -> tuple[float, int]:
    """Each thing keeps `window` updates unanswered: deltas/s received, rejections."""

    async def drive(thing: Thing, deadline: float) -> None:
        while time.perf_counter() < deadline:
            while thing.in_flight < window:
                thing.update()
            thing.window.clear()
            try:
                await asyncio.wait_for(thing.window.wait(), 1)
            except TimeoutError:
                pass

    before = sum(t.deltas for t in things)
    rejected = sum(t.rejected for t in things)
    started = time.perf_counter()
    await asyncio.gather(*(drive(t, started + seconds) for t in things))
    await asyncio.sleep(0.5)  # the last answers
    elapsed = time.perf_counter() - started
    return (sum(t.deltas for t in things) - before) / elapsed, sum(
        t.rejected for t in things
    ) - rejected


async def at_rate(things: list[Thing], rate: int, seconds: float) -> tuple[list[float], dict]:
    """`rate` updates/s in total, round robin over the things, in 5 ms ticks: the latencies, and
    the counts (sent, skipped: the thing had 10 in flight, accepted, rejected, deltas)."""
    latencies = things[0].latencies
    latencies.clear()
    before = {
        k: sum(getattr(t, k) for t in things) for k in ("sent", "accepted", "rejected", "deltas")
    }
    skipped = 0
    tick = 0.005
    started = next_at = time.perf_counter()
    index = due = 0
    while time.perf_counter() - started < seconds:
        due += rate * tick  # fractions carried over: the rate exactly, not rounded per tick
        for _ in range(int(due)):
            thing = things[index % len(things)]
            index += 1
            if thing.in_flight < 10:  # AWS's limit: the rate is spread, so rarely binding
                thing.update()
            else:
                skipped += 1
        due -= int(due)
        next_at += tick
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    await asyncio.sleep(0.5)
    counts = {k: sum(getattr(t, k) for t in things) - v for k, v in before.items()}
    return sorted(latencies), {**counts, "skipped": skipped}


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


async def run(port: int, slug: str, names: list[str], args, broker) -> None:
    things = await connect_things(port, slug, names)
    try:
        await flat_out(things, args.window, 1.0)  # warm-up: every shadow's row exists
        cpu, pg = broker.cpu_seconds(), postgres_cpu_seconds()
        rate, rejected = await flat_out(things, args.window, args.seconds)
        cpu, pg = broker.cpu_seconds() - cpu, postgres_cpu_seconds() - pg
        per_update = cpu / (rate * args.seconds) * 1e6 if rate else float("nan")
        print(
            f"flat out: {rate:,.0f} updates/s with a delta each ({len(things)} things, "
            f"{args.window} in flight each), {rejected} rejected; broker CPU "
            f"{cpu / args.seconds:.2f} s/s = {per_update:.0f} µs per update (one core's worth: "
            f"{1e6 / per_update:,.0f} updates/s), Postgres CPU {pg / args.seconds:.2f} s/s",
            flush=True,
        )
        target = args.rate or int(rate / 2)
        cpu, pg = broker.cpu_seconds(), postgres_cpu_seconds()
        latencies, counts = await at_rate(things, target, args.seconds)
        cpu, pg = broker.cpu_seconds() - cpu, postgres_cpu_seconds() - pg
        print(
            f"at {target:,} updates/s: {counts['sent']:,} sent ({counts['skipped']:,} skipped: "
            f"10 in flight), {counts['accepted']:,} accepted, {counts['rejected']} rejected, "
            f"{counts['deltas']:,} deltas; update → "
            f"delta p50 {percentile(latencies, 0.5):.1f} ms, p99 "
            f"{percentile(latencies, 0.99):.1f} ms, max {percentile(latencies, 1.0):.1f} ms; "
            f"broker CPU {cpu / args.seconds:.2f} s/s, Postgres CPU {pg / args.seconds:.2f} s/s",
            flush=True,
        )
    finally:
        for thing in things:
            thing.transport.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--things", type=int, default=100)
    parser.add_argument("--window", type=int, default=10, help="updates in flight per thing")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=int, help="the fixed rate (default: half of flat out)")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    slug, names = seed(args.things)
    broker = start_runbroker()
    try:
        if shutil_which_taskset():
            os.sched_setaffinity(0, {1})  # the generator on the other core
        asyncio.run(run(broker.port, slug, names, args, broker))
    finally:
        broker.stop()
        cleanup(slug)


def shutil_which_taskset() -> bool:
    import shutil

    return bool(shutil.which("taskset")) and (os.cpu_count() or 1) > 1


if __name__ == "__main__":
    main()
