"""What the archive costs the broker as operators run it (issues 14 and 31).

    .venv/bin/python -m bench.archive [--seconds 5] [--pairs 100] [--qos 0,1] [--tenants 10]
        [--payload filler|json] [--store file|s3] [--history everything|nothing]

`--history` says what the tenants keep (issue 31: the broker archives only what a history policy
or an enabled rule needs): `everything` (the default) gives each tenant a history policy on `#`,
so every publish is archived, as before issue 31; `nothing` gives them no policy and no rule, so
the broker with its archive on decides, per message, that there is nothing to keep: the issue's
target is that this costs ≤ 1.02× the CPU per message of `--no-archive` (and the run checks that
not one publish row was archived).

The broker is `python manage.py runbroker` on Postgres (the embedded cluster, or DATABASE_URL)
with its defaults: usage metering on, the archive on (Parquet segments every second into the
object store: a scratch `file://` folder, or with `--store s3` a bucket on moto's S3 server, as
deployments write to S3) or off (`--no-archive`). The pairs are spread over
`--tenants` tenants, as on a shared broker (every archive batch then holds several tenants). Each
tenant and its device come from `manage.py create_tenant` / `create_device`, with ACL rules
(`add_acl`) and quotas (`set_quota`, high enough not to refuse) checked on every PUBLISH and
SUBSCRIBE. Mosquitto 2 runs the same pairs in the same run, for reference.

Per QoS: 100 pairs of 1 KiB messages flat out, archive on, off, off, on (A-B-B-A, so drift on a
shared machine lands on both sides) with Mosquitto between; figures are means. Reported: delivered
msg/s, broker CPU-seconds per 1,000 delivered, and archive on ÷ off for both (the target: ≥ 0.85×
the msg/s, ≤ 1.15× the CPU per message), and for each run of ours where that CPU went, in µs per
message by thread (the event loop, `archive-build` encoding, `archive-upload` writing to the
store). After each archive-on run the archived publish rows are
counted from the Parquet files, so a run that archived nothing cannot pass for a cheap one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench import brokers, s3, scenarios
from bench.brokers import REPO, RunningBroker
from bench.loadgen import json_bodies

PASSWORD = "bench-archive-password-0123456789"


def manage(*args: str) -> dict:
    """One operator command, as an operator runs it; its JSON answer."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed: {result.stderr or result.stdout}")
    return json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}


def keep_everything(tenants: list[str]) -> None:
    """A history policy on `#` for each tenant (a day): the broker archives all they publish."""
    _django()
    from tenants.history.services import history_policy_create
    from tenants.models import Tenant

    for tenant in Tenant.objects.filter(slug__in=tenants):
        history_policy_create(tenant=tenant, topic_filter="#", days=1)


def seed(tenants: int = 1) -> tuple[list[str], list[tuple[str, str]]]:
    """Scratch tenants, each with one device (any client id), 10 ACL rules and quotas, made by
    the operator commands (`manage.py create_tenant`, `create_device`, `add_acl`, `set_quota`):
    the first from a shell, the others with the same commands run in this process (a command's
    start-up is a second or two; 13 per tenant)."""
    manage("migrate", "--verbosity", "0")
    made = [_seed_tenant(manage)]
    if tenants > 1:
        _django()
        from django.core.management import call_command

        def in_process(*args: str) -> dict:
            out = io.StringIO()
            call_command(*args, stdout=out)
            text = out.getvalue()
            return json.loads(text) if text.strip().startswith("{") else {}

        made += [_seed_tenant(in_process) for _ in range(tenants - 1)]
    return [slug for slug, _ in made], [login for _, login in made]


def _seed_tenant(run) -> tuple[str, tuple[str, str]]:
    tenant = f"bench-arch-{uuid.uuid4().hex[:6]}"
    run("create_tenant", tenant)
    device = run("create_device", tenant, "d", "--password", PASSWORD, "--client-ids", "any")
    for topic in ("admin/#", "$internal/#", "ops/+/secret", "firmware/#", "billing/#"):
        run("add_acl", tenant, "--action", "both", "--deny", "--topic", topic)
    for topic in ("bench/slow/#", "bench/pairs/#", "bench/fan/#", "bench/${client}/#", "t/#"):
        run("add_acl", tenant, "--action", "both", "--allow", "--topic", topic)
    run(
        "set_quota",
        tenant,
        "max_connections=100000",
        "max_publish_rate=10000000",
        "max_inbound_bytes_rate=2000000000",
        "max_outbound_bytes_rate=2000000000",
        "max_message_size=1000000",
        "max_subscriptions_per_client=100",
        "max_queued_messages=5000",
    )
    return tenant, (device["username"], PASSWORD)


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    import django

    django.setup()


def cleanup(tenants: list[str]) -> None:
    _django()
    from tenants.models import Tenant

    Tenant.objects.filter(slug__in=tenants).delete()


def start_runbroker(archive: bool, store_url: str) -> RunningBroker:
    workdir = Path(tempfile.mkdtemp(prefix="bench-runbroker-"))
    port = brokers._free_port()
    cmd = [sys.executable, "manage.py", "runbroker", "--port", str(port), "--ws-port", "0"]
    if not archive:
        cmd.append("--no-archive")
    env = {**os.environ, "OBJECT_STORE_URL": store_url}
    process = subprocess.Popen(  # runbroker execs the broker: this pid is the broker's
        brokers._pinned(cmd),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "stderr.log", "w"),
        preexec_fn=brokers._raise_nofile,
    )
    brokers._wait_port(process, port, "runbroker")
    name = "runbroker, archive " + ("on" if archive else "off")  # on: tenants keep what they ask
    return RunningBroker(name, process, port, workdir)


def archived_publishes(store_url: str) -> int:
    """Publish rows in the archive's Parquet segments under `store_url` (read back as any
    reader would, through the object store)."""
    from common.stores.object_store import open_object_store

    store, total = open_object_store(store_url), 0
    for key in store.list("archive/"):  # not the usage log beside it
        if not key.endswith(".parquet"):
            continue
        events = pq.read_table(pa.BufferReader(store.get(key)), columns=["event"])["event"]
        total += pc.sum(pc.equal(events, "message.publish")).as_py() or 0
    return total


class Stores:
    """A fresh, empty object store per broker run: a scratch folder (`file`), or a prefix of a
    bucket on moto's S3 server (`s3`, as deployments run: boto3 over HTTP)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._stack = contextlib.ExitStack()
        if kind == "s3":
            env = self._stack.enter_context(s3.moto_server(core=1))
            os.environ.update(env)  # the brokers (and `archived_publishes`) reach it
            s3.create_bucket(env, BUCKET)

    def new(self) -> str:
        if self.kind == "s3":
            return f"s3://{BUCKET}/run-{uuid.uuid4().hex[:8]}"
        return Path(tempfile.mkdtemp(prefix="bench-archive-objects-")).as_uri()

    def discard(self, url: str) -> None:
        if url.startswith("file://"):
            shutil.rmtree(urlparse(url).path, ignore_errors=True)

    def close(self) -> None:
        self._stack.close()


BUCKET = "bench-archive"


async def run(
    pairs: int,
    seconds: float,
    qos_levels: list[int],
    creds: list[tuple[str, str]],
    payload: str = "filler",
    stores: Stores | None = None,
    history: str = "everything",
) -> str:
    stores = stores or Stores("file")
    where = "moto's S3 server" if stores.kind == "s3" else "a local folder"
    keeps = "keep every topic" if history == "everything" else "keep nothing (no policy, no rule)"
    lines = [
        f"load average at start {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores); "
        f"pairs across {len(creds)} tenant(s), which {keeps}; {payload} payloads; "
        f"object store: {where}"
    ]
    bodies = json_bodies(1024) if payload == "json" else None
    print(lines[0], flush=True)
    for qos in qos_levels:
        runs: dict[str, list[scenarios.Result]] = {"on": [], "off": [], "mosquitto": []}
        archived: list[tuple[int, int]] = []
        for label in ("on", "off", "mosquitto", "off", "on", "mosquitto"):
            store_url = stores.new()
            if label == "mosquitto":
                broker = brokers.start("mosquitto")
                who = (brokers.USERNAME, brokers.PASSWORD)
            else:
                broker = start_runbroker(label == "on", store_url)
                who = creds
            try:
                result = await scenarios.pairs(broker, pairs, qos, seconds, who, bodies)
            finally:
                broker.stop()  # SIGTERM: the archive uploads what it holds before exiting
            runs[label].append(result)
            if label == "on":
                archived.append((archived_publishes(store_url), result.received))
            stores.discard(store_url)
            split = ""
            if label != "mosquitto":  # where the broker's CPU went, µs per message by thread
                split = "  | " + ", ".join(
                    f"{name} {us:.2f}"
                    for name, us in sorted(result.cpu_us_by_thread.items(), key=lambda kv: -kv[1])
                )
            print(
                f"  qos={qos} {broker.name:<24} {result.delivered_per_s:>9,.0f} msg/s "
                f"cpu/1k {result.cpu_per_1000:.4f}  sent {result.sent:,} received "
                f"{result.received:,}{split}",
                flush=True,
            )
        rate = {k: sum(r.delivered_per_s for r in v) / len(v) for k, v in runs.items()}
        cpu = {k: sum(r.cpu_per_1000 for r in v) / len(v) for k, v in runs.items()}
        if history == "nothing" and any(a for a, _ in archived):
            raise RuntimeError(f"tenants that keep nothing had publishes archived: {archived}")
        lines.append(
            f"pairs n={pairs} qos={qos} 1 KiB | archive off {rate['off']:>8,.0f} msg/s "
            f"cpu/1k {cpu['off']:.4f} | archive on {rate['on']:>8,.0f} msg/s cpu/1k "
            f"{cpu['on']:.4f} | mosquitto {rate['mosquitto']:>8,.0f} msg/s cpu/1k "
            f"{cpu['mosquitto']:.4f}\n"
            f"  archive on/off: throughput {rate['on'] / rate['off']:.2f}x, CPU per message "
            f"{cpu['on'] / cpu['off']:.2f}x | vs Mosquitto (CPU efficiency): off "
            f"{cpu['mosquitto'] / cpu['off']:.2f}x, on {cpu['mosquitto'] / cpu['on']:.2f}x | "
            "archived publish rows / delivered: " + ", ".join(f"{a:,}/{d:,}" for a, d in archived)
        )
        if history == "nothing":
            lines[-1] += (
                f"\n  tenants keeping nothing: archive on/off CPU per message "
                f"{cpu['on'] / cpu['off']:.3f}x (target <= 1.02x); per run on "
                + ", ".join(f"{r.cpu_per_1000:.4f}" for r in runs["on"])
                + ", off "
                + ", ".join(f"{r.cpu_per_1000:.4f}" for r in runs["off"])
            )
        print(lines[-1], flush=True)
    lines.append(f"load average at end {os.getloadavg()[0]:.1f}")
    print(lines[-1], flush=True)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--qos", default="0,1")
    parser.add_argument(
        "--tenants", type=int, default=10, help="pairs spread over this many tenants (default 10)"
    )
    parser.add_argument(
        "--payload",
        choices=["filler", "json"],
        default="filler",
        help="after each payload's timestamp: x's (default), or device telemetry as JSON",
    )
    parser.add_argument(
        "--store",
        choices=["file", "s3"],
        default="file",
        help="the object store: a local folder (default), or moto's S3 server on loopback, "
        "pinned off the broker's core (deployments write to S3)",
    )
    parser.add_argument(
        "--history",
        choices=["everything", "nothing"],
        default="everything",
        help="what the tenants keep: every topic (a history policy on #; default), or nothing "
        "(no policy, no rule: the cost of deciding so, against --no-archive)",
    )
    args = parser.parse_args(argv)
    tenants, creds = seed(args.tenants)
    if args.history == "everything":
        keep_everything(tenants)
    stores = Stores(args.store)
    try:
        import uvloop

        uvloop.install()
        qos_levels = [int(q) for q in args.qos.split(",")]
        asyncio.run(
            run(args.pairs, args.seconds, qos_levels, creds, args.payload, stores, args.history)
        )
    finally:
        stores.close()
        cleanup(tenants)


if __name__ == "__main__":
    main()
