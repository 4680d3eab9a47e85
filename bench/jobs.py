"""A job to a fleet, on the broker as operators run it (issue 32): how long until every device is
told, and until every device's execution is SUCCEEDED.

    .venv/bin/python -m bench.jobs [--devices 10000] [--concurrency 100]

The broker is `python manage.py runbroker` on Postgres (the embedded cluster, or DATABASE_URL)
with its defaults (metering and the archive on), pinned to core 0; the generator runs on core 1
and speaks MQTT 3.1.1 itself over raw asyncio sockets, as `bench.loadgen` (all the devices'
connections in this one process). `--devices` devices of one tenant are made with the services
the API uses and put in one device group; each connects as itself and subscribes at QoS 1, as
AWS's device SDK (`awsiot.iotjobs`) does, to its `$aws/things/{thing}/jobs/notify-next`,
`…/jobs/start-next/accepted|rejected` and `…/jobs/+/update/accepted|rejected`.

Then a job targeting the group is created with `job_services.job_create`, the service
`POST /api/v1/jobs` calls (without a rollout rate: every device gets its execution at once; a
rollout would release at most 1,000 a minute, AWS's maximum, and the figure would be the rate);
the clock starts as the call starts. Each device, as the SDK's jobs sample does, answers its
notify-next at once with a start-next, and the start-next's accepted execution with an update to
SUCCEEDED. Measured from the start of the call: the call itself (one transaction queueing every
execution and leaving the notifications for the broker), the first and the last notify-next
received, the last update accepted, and when the job as the REST API shows it (its
`process_details`, polled every 0.1 s) counts every execution SUCCEEDED; the broker's and
Postgres's CPU seconds over the whole of it. The job's detail is read once at the end, as
`GET /api/v1/jobs/{id}` serves it, to check each device's execution is SUCCEEDED.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bench import brokers
from bench.loadgen import _string, connect_packet, whole_packets
from bench.shadows import PASSWORD, cleanup, postgres_cpu_seconds, start_runbroker
from common.mqtt.properties import encode_varint

GROUP = "fleet"
POLL_SECONDS = 0.1
KEEP_ALIVE = 1200  # a 10,000-device run outlasts 1.5 × the loadgen's default of 120 s


def seed(devices: int) -> tuple[str, list[str]]:
    """A scratch tenant with `devices` devices in one group (high quotas: the bench measures
    jobs, not the plan's limits); Django must be set up."""
    from tenants.devices import services as device_services
    from tenants.jobs import services as job_services
    from tenants.tenant import services as tenant_services

    slug = f"bench-jobs-{uuid.uuid4().hex[:6]}"
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
    names = [f"device-{n:05d}" for n in range(devices)]
    for name in names:
        device_services.device_create(tenant=tenant, name=name, password=PASSWORD)
    job_services.group_create(tenant=tenant, name=GROUP, devices=names)
    return slug, names


def _subscribe_packet(filters: list[str], packet_id: int = 1) -> bytes:
    body = packet_id.to_bytes(2, "big") + b"".join(_string(f) + b"\x01" for f in filters)
    return b"\x82" + encode_varint(len(body)) + body


def _publish_packet(topic: str, body: bytes) -> bytes:
    packet = _string(topic) + body
    return b"\x30" + encode_varint(len(packet)) + packet


@dataclass
class Tally:
    """What every device saw, with the times (perf_counter) that matter."""

    notified: list[float] = field(default_factory=list)  # each device's first notify-next
    succeeded: list[float] = field(default_factory=list)  # each update accepted
    rejected: list[str] = field(default_factory=list)  # "topic: body" of each rejection
    gave_up: set[str] = field(default_factory=set)  # devices rejected: the SDK sample stops
    messages: int = 0


class Device(asyncio.Protocol):
    """One device running the SDK jobs sample's loop: notify-next → start-next → update."""

    def __init__(self, name: str, tally: Tally) -> None:
        self.name = name
        self.tally = tally
        self.prefix = f"$aws/things/{name}/jobs/".encode()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.ready = asyncio.get_event_loop().create_future()
        self.working_on = ""  # the job id being executed ("" when idle)
        self.tokens = 0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"{self.name}: connection closed"))

    def _request(self, suffix: str, document: dict) -> None:
        self.tokens += 1
        document["clientToken"] = f"{self.name}-{self.tokens}"
        topic = f"$aws/things/{self.name}/jobs/{suffix}"
        self.transport.write(_publish_packet(topic, json.dumps(document).encode()))

    def _on_message(self, topic: bytes, payload: bytes, now: float) -> None:
        self.tally.messages += 1
        if not topic.startswith(self.prefix):
            return
        rest = topic[len(self.prefix) :]
        if rest.endswith(b"/rejected"):
            self.tally.rejected.append(f"{topic.decode()}: {payload[:200].decode()}")
            self.tally.gave_up.add(self.name)
            self.working_on = ""
            return
        if rest == b"notify-next":
            execution = json.loads(payload).get("execution")
            if execution and not self.working_on:
                self.tally.notified.append(now)
                self.working_on = execution["jobId"]
                self._request("start-next", {"statusDetails": {"step": "downloading"}})
        elif rest == b"start-next/accepted":
            execution = json.loads(payload).get("execution")
            if execution:
                self._request(f"{execution['jobId']}/update", {"status": "SUCCEEDED"})
        elif rest.endswith(b"/update/accepted"):
            self.tally.succeeded.append(now)
            self.working_on = ""

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
                self._on_message(topic, bytes(buffer[at:end]), now)
            elif kind == 2 and not self.ready.done():
                self.ready.set_result(buffer[index + 1] == 0)
            elif kind == 9 and not self.ready.done():  # SUBACK: every filter granted
                self.ready.set_result(all(code != 0x80 for code in buffer[index + 2 : end]))


async def connect_devices(port: int, slug: str, names: list[str], concurrency: int) -> tuple:
    """Every device connected and subscribed, `concurrency` at a time: (devices, tally)."""
    loop = asyncio.get_running_loop()
    tally = Tally()
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> Device:
        async with gate:
            _, device = await loop.create_connection(lambda: Device(name, tally), "127.0.0.1", port)
            device.transport.write(connect_packet(name, f"{slug}/{name}", PASSWORD, KEEP_ALIVE))
            if not await asyncio.wait_for(device.ready, 60):
                raise ConnectionError(f"{name}: CONNACK refused")
            device.ready = loop.create_future()
            base = f"$aws/things/{name}/jobs"
            filters = [
                f"{base}/notify-next",
                f"{base}/start-next/accepted",
                f"{base}/start-next/rejected",
                f"{base}/+/update/accepted",
                f"{base}/+/update/rejected",
            ]
            device.transport.write(_subscribe_packet(filters))
            if not await asyncio.wait_for(device.ready, 60):
                raise ConnectionError(f"{name}: a subscription refused")
            return device

    return await asyncio.gather(*(one(name) for name in names)), tally


def _create_job(slug: str, job_id: str) -> None:
    from tenants.jobs import services as job_services
    from tenants.models import Tenant

    job_services.job_create(
        tenant=Tenant.objects.get(slug=slug),
        job_id=job_id,
        document={"operation": "firmware-update", "version": "2.4.1"},
        targets={"groups": [GROUP]},
        description="bench.jobs",
    )


def _succeeded(slug: str, job_id: str) -> tuple[int, str]:
    """How many executions the job's REST row counts SUCCEEDED, and its status."""
    from tenants.api.job_views import JobOutput
    from tenants.jobs import selectors as job_selectors
    from tenants.models import Tenant

    job = job_selectors.job_list(tenant=Tenant.objects.get(slug=slug)).get(job_id=job_id)
    row = JobOutput(job).data
    return row["process_details"]["SUCCEEDED"], row["status"]


def _detail_statuses(slug: str, job_id: str) -> tuple[dict[str, int], str]:
    """Each execution's status as `GET /api/v1/jobs/{id}` serves it, counted, and the job's."""
    from tenants.api.job_views import JobDetailOutput
    from tenants.jobs import selectors as job_selectors
    from tenants.models import Tenant

    job = job_selectors.job_get(tenant=Tenant.objects.get(slug=slug), job_id=job_id)
    detail = JobDetailOutput(job).data
    counts: dict[str, int] = {}
    for execution in detail["executions"]:
        counts[execution["status"]] = counts.get(execution["status"], 0) + 1
    return counts, detail["status"]


@dataclass
class Result:
    devices: int
    connect_seconds: float
    create_seconds: float
    first_notified: float
    all_notified: float | None
    all_updates_accepted: float | None
    all_succeeded_rest: float | None
    job_status: str  # when every execution was counted SUCCEEDED
    final_status: str  # a second later
    notified: int
    succeeded: int
    rejected: list[str]
    broker_cpu: float
    postgres_cpu: float
    detail: dict[str, int]


async def measure(
    port: int,
    slug: str,
    names: list[str],
    *,
    concurrency: int = 100,
    limit: float = 600.0,
    broker: brokers.RunningBroker | None = None,
    postgres_cpu=postgres_cpu_seconds,
) -> Result:
    """Connect the devices, create the job, wait until the REST API counts every execution
    SUCCEEDED (or `limit` seconds passed). The database is read and written from one thread of
    its own (Django's ORM is synchronous), whose connection is closed at the end."""
    loop = asyncio.get_running_loop()
    orm = ThreadPoolExecutor(1, thread_name_prefix="bench-jobs-orm")

    def in_orm(function, *args):
        return loop.run_in_executor(orm, function, *args)

    started = time.perf_counter()
    devices, tally = await connect_devices(port, slug, names, concurrency)
    connect_seconds = time.perf_counter() - started
    job_id = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        await asyncio.sleep(0.5)  # the last SUBACKs' routes settled
        cpu, pg = broker.cpu_seconds() if broker else 0.0, postgres_cpu()
        t0 = time.perf_counter()
        await in_orm(_create_job, slug, job_id)
        created = time.perf_counter() - t0
        counted, status, all_succeeded = 0, "", None
        while time.perf_counter() - t0 < limit:
            counted, status = await in_orm(_succeeded, slug, job_id)
            if counted >= len(names):
                all_succeeded = time.perf_counter() - t0
                break
            if tally.gave_up and len(tally.succeeded) + len(tally.gave_up) >= len(names):
                break  # every device answered or gave up: nothing more will come
            await asyncio.sleep(POLL_SECONDS)
        cpu = (broker.cpu_seconds() if broker else 0.0) - cpu
        pg = postgres_cpu() - pg
        await asyncio.sleep(1.0)
        detail, final_status = await in_orm(_detail_statuses, slug, job_id)
        complete = len(tally.notified) >= len(names)
        done = len(tally.succeeded) >= len(names)
        return Result(
            devices=len(names),
            connect_seconds=connect_seconds,
            create_seconds=created,
            first_notified=min(tally.notified, default=t0) - t0,
            all_notified=max(tally.notified) - t0 if complete else None,
            all_updates_accepted=max(tally.succeeded) - t0 if done else None,
            all_succeeded_rest=all_succeeded,
            job_status=status,
            final_status=final_status,
            notified=len(tally.notified),
            succeeded=len(tally.succeeded),
            rejected=tally.rejected,
            broker_cpu=cpu,
            postgres_cpu=pg,
            detail=detail,
        )
    finally:
        for device in devices:
            device.transport.close()
        from django.db import connections

        await in_orm(connections.close_all)
        orm.shutdown()


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


def report(result: Result) -> str:
    lines = [
        f"{result.devices:,} devices connected and subscribed in {result.connect_seconds:.1f} s",
        f"job created (job_services.job_create, no rollout limit) in {result.create_seconds:.2f} s",
        f"notify-next: first {_seconds(result.first_notified)}, all {result.notified:,} "
        f"by {_seconds(result.all_notified)} after the create call began",
        f"start-next → update SUCCEEDED: all {result.succeeded:,} updates accepted by "
        f"{_seconds(result.all_updates_accepted)}; the REST API counts every execution "
        f"SUCCEEDED at {_seconds(result.all_succeeded_rest)} (polled every {POLL_SECONDS} s), "
        f"job {result.job_status} then, {result.final_status} a second later",
        f"broker CPU {result.broker_cpu:.2f} s, Postgres CPU {result.postgres_cpu:.2f} s over "
        f"it; {len(result.rejected)} rejected; job detail: {result.detail}",
    ]
    lines += [f"  rejected: {r}" for r in result.rejected[:5]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=100,
        help="connects in flight (the broker refuses over 128 unauthenticated sockets a source)",
    )
    parser.add_argument("--limit", type=float, default=600.0, help="seconds to wait at most")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    brokers._raise_nofile()  # this process holds every device's connection
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    seeding = time.perf_counter()
    slug, names = seed(args.devices)
    print(f"seeded {len(names):,} devices in {time.perf_counter() - seeding:.0f} s", flush=True)
    broker = start_runbroker()
    try:
        if (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(0, {1})  # the generator on the other core
        result = asyncio.run(
            measure(
                broker.port,
                slug,
                names,
                concurrency=args.concurrency,
                limit=args.limit,
                broker=broker,
            )
        )
        print(report(result), flush=True)
        print(f"load average {os.getloadavg()[0]:.2f} at the end", flush=True)
    finally:
        broker.stop()
        cleanup(slug)


if __name__ == "__main__":
    main()
