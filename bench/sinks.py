"""Sinks' delivery measured (issue 47): per sink type, outputs per second and CPU per output
through the platform's outbox and sender, beside the same sink's writer alone (`common.sinks`,
no outbox: what the durable queue costs), and the latency from an output's message to the far
end taking it; with `--outage`, one sink cut off for that long under a steady load: everything
delivered after it returns, in order per key, and the time it takes to drain.

    .venv/bin/python -m bench.sinks [--outputs 10000] [--types s3,sqs,kinesis,postgres,...]
    .venv/bin/python -m bench.sinks --outage 60 --rate 1000 [--types http_batch]

Real far ends on loopback, as the tests have them: moto's server (S3, SQS, Kinesis), a database
of the tenant's own on the embedded Postgres, Mosquitto, an HTTP receiver. The platform's side
runs in this process (`SinkOutbox` appends in chunks as the lanes do; one `SinkSender` worker
per sink, as the live job runs it), on a throwaway Postgres cluster under `.data/`. CPU is this
process's (the far ends run in their own); the far ends share this 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.outage import Outage, free_port
from bench.rules_live import _django

KEYS = 100  # devices: each output's key, the order kept per key


class Receiver:
    """An HTTP batch receiver: every output it took, in arrival order."""

    def __init__(self) -> None:
        self.got: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.got += [o["n"] for o in json.loads(body)]
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class FarEnds:
    """Every far end once, and an action per type through `outage` ports where asked."""

    def __init__(self, moto: dict[str, str], tenant_dsn: str, work: Path) -> None:
        import boto3

        self.endpoint = moto["AWS_ENDPOINT_URL"]
        self.tenant_dsn = tenant_dsn
        self.aws = {"region_name": "us-east-1", "aws_access_key_id": "bench",
                    "aws_secret_access_key": "bench", "endpoint_url": self.endpoint}  # fmt: skip
        self.boto = lambda service: boto3.client(service, **self.aws)
        self.receiver = Receiver()
        self.mqtt_port = free_port()
        config = work / "mosquitto.conf"
        config.write_text(f"listener {self.mqtt_port} 127.0.0.1\nallow_anonymous true\n")
        self.mosquitto = subprocess.Popen(["/usr/sbin/mosquitto", "-c", str(config)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(0.5)

    def port_of(self, kind: str) -> int:
        if kind in ("s3", "sqs", "kinesis"):
            return int(self.endpoint.rsplit(":", 1)[1])
        if kind == "postgres":
            return int(self.tenant_dsn.rsplit(":", 1)[1].split("/", 1)[0])
        return self.mqtt_port if kind == "mqtt_bridge" else self.receiver.port

    def action(self, kind: str, port: int | None = None) -> dict[str, Any]:
        """A fresh destination of `kind` (a new bucket, queue, stream, table), through `port`."""
        port = port or self.port_of(kind)
        name = f"b{uuid.uuid4().hex[:8]}"
        aws = {"endpoint_url": f"http://127.0.0.1:{port}", "region": "us-east-1",
               "access_key_id": "bench", "secret_access_key": "bench"}  # fmt: skip
        if kind == "s3":
            self.boto("s3").create_bucket(Bucket=name)
            return {"type": "s3", "bucket": name, "format": "jsonl", **aws}
        if kind == "sqs":
            url = self.boto("sqs").create_queue(QueueName=name)["QueueUrl"]
            return {"type": "sqs", "queue_url": url, **aws}
        if kind == "kinesis":
            self.boto("kinesis").create_stream(StreamName=name, ShardCount=1)
            time.sleep(0.5)
            return {"type": "kinesis", "stream": name, **aws}
        if kind == "postgres":
            import psycopg

            with psycopg.connect(self.tenant_dsn, autocommit=True) as conn:
                conn.execute(f"CREATE TABLE {name} (ts timestamptz, key text, payload jsonb)")
            user_host, database = self.tenant_dsn.split("://", 1)[1].split("/", 1)
            user = user_host.split("@", 1)[0]
            dsn = f"postgresql://{user}@127.0.0.1:{port}/{database}"
            return {"type": "postgres", "dsn": dsn, "table": name}
        if kind == "mqtt_bridge":
            return {"type": "mqtt_bridge", "host": "127.0.0.1", "port": port,
                    "topic": "out/${key}", "qos": 1}  # fmt: skip
        return {"type": "http_batch", "url": f"http://127.0.0.1:{port}/in"}

    def close(self) -> None:
        self.mosquitto.terminate()
        self.receiver.server.shutdown()


def _output(n: int) -> dict[str, Any]:
    key = f"dev-{n % KEYS}"
    return {"n": n, "key": key, "clientid": key, "temp": 20.0 + n % 17, "unit": "C",
            "site": "plant-1", "ts": int(time.time() * 1000)}  # fmt: skip


def _figures(values: list[float]) -> str:
    if not values:
        return "none"
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return f"p50 {statistics.median(values):.3f} s, p99 {p99:.3f} s"


def alone(kind: str, action: dict[str, Any], outputs: int) -> tuple[float, float]:
    """The writer alone over `outputs` (its own batches): (outputs/s, CPU ms per 1k)."""
    from common.sinks import Record, batch_limits, writer_for

    most, _ = batch_limits(action)
    writer = writer_for(action, "bench")
    records = [Record(n + 1, f"dev-{n % KEYS}", json.dumps(o), o["ts"], o)
               for n, o in ((n, _output(n)) for n in range(outputs))]  # fmt: skip
    started, cpu = time.monotonic(), time.process_time()
    for first in range(0, outputs, most):
        results = writer.send(records[first : first + most])
        assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    took, cpu = time.monotonic() - started, time.process_time() - cpu
    writer.close()
    return outputs / took, cpu * 1e6 / outputs


class Platform:
    """A tenant with a rule per sink, the outbox and a sender (latencies recorded)."""

    def __init__(self, dsn: str) -> None:
        from spark.rules.outbox import SinkOutbox
        from spark.rules.sink_sender import SinkSender
        from tenants.tenant import services as tenant_services

        self.dsn = dsn
        self.tenant = tenant_services.tenant_create(f"sk{uuid.uuid4().hex[:6]}", plan="pro")
        tenant_services.tenant_set_quota(self.tenant, {"max_sink_outbox_messages": 10_000_000,
                                                       "max_sink_outbox_bytes": 1 << 34})  # fmt: skip
        self.outbox = SinkOutbox(dsn)
        self.latencies: list[float] = []
        platform = self

        class Timed(SinkSender):
            def _settle(self, conn, sink, rule, action, claimed, results):  # type: ignore[override]
                now = time.time() * 1000
                platform.latencies += [(now - r.ts_ms) / 1000 for r, res in
                                       zip(claimed.records, results, strict=True) if res.ok]  # fmt: skip
                super()._settle(conn, sink, rule, action, claimed, results)

        self.sender = Timed(dsn, workers=1, poll=0.05)  # the live job's back-off and attempts
        self.outbox.on_append = self.sender.wake
        self.sender.start()

    def rule(self, action: dict[str, Any]):
        from tenants.rules import services as rule_services

        return rule_services.rule_create(tenant=self.tenant, name=f"r{uuid.uuid4().hex[:6]}",
                                         sql='SELECT * FROM "plant/#"', actions=[action])  # fmt: skip

    def append(self, rule, action: dict[str, Any], first: int, count: int) -> None:
        from spark.rules.actions import Job

        jobs = []
        for n in range(first, first + count):
            output = _output(n)
            jobs.append(Job(rule.id, self.tenant.slug, "", action, output, output["ts"],
                            client_id=output["key"], action_index=0))  # fmt: skip
        for chunk in range(0, len(jobs), 2000):
            outcomes = self.outbox.append(jobs[chunk : chunk + 2000])
            assert all(o.ok for o in outcomes), outcomes[0].error

    def waiting(self, rule) -> int:
        from tenants.models import SinkOutbox

        return SinkOutbox.objects.filter(rule=rule).count()

    def drain(self, rule, timeout: float) -> float:
        started = time.monotonic()
        while self.waiting(rule) and time.monotonic() - started < timeout:
            time.sleep(0.05)
        return time.monotonic() - started

    def close(self) -> None:
        self.sender.stop()
        self.outbox.close()


def throughput(platform: Platform, ends: FarEnds, kind: str, outputs: int) -> None:
    rate_alone, cpu_alone = alone(kind, ends.action(kind), outputs)
    action = ends.action(kind)
    rule = platform.rule(action)
    platform.latencies = []
    started, cpu = time.monotonic(), time.process_time()
    platform.append(rule, action, 0, outputs)
    appended = time.monotonic() - started
    platform.drain(rule, 600)
    took, cpu = time.monotonic() - started, time.process_time() - cpu
    rate = outputs / took
    print(
        f"{kind:12s} writer alone {rate_alone:8,.0f}/s cpu/1k {cpu_alone / 1000:.3f} s | "
        f"outbox + sender {rate:8,.0f}/s cpu/1k {cpu * 1e3 / outputs:.3f} s (appended at "
        f"{outputs / appended:,.0f}/s) | ratio {rate / rate_alone:.2f}x | message to far end "
        f"{_figures(platform.latencies)}"
    )


def outage(platform: Platform, ends: FarEnds, kind: str, seconds: float, rate: float,
           read: Callable[[], list[int]]) -> None:  # fmt: skip
    cut = Outage(ends.port_of(kind))
    action = ends.action(kind, cut.port)
    rule = platform.rule(action)
    sent = 0

    def load(for_seconds: float) -> None:
        nonlocal sent
        end = time.monotonic() + for_seconds
        while time.monotonic() < end:
            tick = time.monotonic()
            count = int(rate / 10)
            platform.append(rule, action, sent, count)
            sent += count
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))

    load(5)
    cut.down()
    load(seconds)
    depth = platform.waiting(rule)
    cut.up()
    drained = platform.drain(rule, 3600)
    got = read()
    from tenants.models import SinkState

    dead = SinkState.objects.get(rule=rule).dead
    in_order = all(
        [n for n in got if n % KEYS == k] == sorted(n for n in got if n % KEYS == k)
        for k in range(KEYS)
    )
    print(
        f"{kind}: {sent:,} outputs at {rate:g}/s, the far end away {seconds:g} s ({depth:,} "
        f"waiting when it came back); drained {drained:.1f} s after; at the far end "
        f"{len(set(got)):,} of {sent:,} ({len(got) - len(set(got))} twice, {dead} dead letters), in order per key: "
        f"{in_order}"
    )
    cut.down()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outputs", type=int, default=10_000)
    parser.add_argument("--types", default="s3,sqs,kinesis,postgres,mqtt_bridge,http_batch")
    parser.add_argument("--outage", type=float, default=0.0, help="seconds a sink is away")
    parser.add_argument("--rate", type=float, default=1000.0, help="outputs/s during --outage")
    args = parser.parse_args(argv)
    os.environ["WEBHOOK_ALLOW"] = "127.0.0.1"  # the far ends are local (an operator's allow)
    os.environ["SINK_S3_FLUSH_SECONDS"] = "1"
    dsn = _django("bench-sinks-postgres")
    import psycopg
    from django.db import connection

    from bench.s3 import moto_server

    db = connection.settings_dict
    tenant_db = f"bench_tenant_{uuid.uuid4().hex[:6]}"
    admin = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{tenant_db}"')
    tenant_dsn = f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{tenant_db}"
    work = Path(tempfile.mkdtemp(prefix="bench-sinks-"))
    with moto_server() as moto:
        ends = FarEnds(moto, tenant_dsn, work)
        platform = Platform(dsn)
        load = os.getloadavg()[0]
        try:
            kinds = args.types.split(",")
            if args.outage:
                print(f"load average {load:.1f} at the start (2 cores)")
                for kind in kinds:
                    reader = {"http_batch": lambda: list(ends.receiver.got)}.get(kind)
                    if reader is None:
                        raise SystemExit("--outage reads its far end back for http_batch only")
                    outage(platform, ends, kind, args.outage, args.rate, reader)
            else:
                print(
                    f"{args.outputs:,} device-like JSON outputs per sink, {KEYS} keys; load "
                    f"average {load:.1f} at the start (2 cores)"
                )
                for kind in kinds:
                    throughput(platform, ends, kind, args.outputs)
        finally:
            platform.close()
            ends.close()
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{tenant_db}" WITH (FORCE)')


if __name__ == "__main__":
    main()
