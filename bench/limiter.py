"""What the publish limiter costs the broker as operators run it (issue 28): two builds, A-B-B-A,
with Mosquitto in the same run.

    .venv/bin/python -m bench.limiter /path/to/base/checkout [--seconds 5] [--tenants 10]
        [--payload json|filler] [--qos 0,1] [--a-args "--no-journey"] [--b-args ...]
        [--feed none|a|b|both] [--rules]

The same checkout twice with different arguments compares a feature on and off, e.g. the
journey (issue 30): `bench.limiter . --a-args=--no-journey`; or the live feed (issue 43):
`bench.limiter . --rules --feed b` (a rule per tenant; A without the feed, B with it), and
`bench.limiter . --feed b` (no rules: what a tenant without rules pays for the feed).

The broker is `python manage.py runbroker` from each checkout (its own `data_plane/` first on
the path, this virtualenv) on Postgres with everything on: archive, usage metering, presence,
ACL rules and quotas, as `bench.archive` seeds them (`manage.py create_tenant`, `create_device`,
`add_acl`, `set_quota`). Every tenant has a publish rate (high enough never to hold anyone), so
every PUBLISH goes through the limiter's turn; 100 pairs of 1 KiB spread over the tenants, flat
out. A is the base checkout (e.g. `git worktree add /tmp/base <commit>`; the archive's compiled
recorder is copied into it when missing), B this one. Reported per QoS: delivered msg/s and
broker CPU per 1,000 messages, B ÷ A (the target: within 3 %), and both against Mosquitto.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import archive, brokers, scenarios
from bench.brokers import REPO, RunningBroker
from bench.loadgen import json_bodies


def start_runbroker(
    repo: Path, store_url: str, extra: list[str] = (), feed: str | None = None
) -> RunningBroker:
    """`runbroker` from `repo` (with `extra` arguments), on this checkout's database
    (DATABASE_URL, else its embedded cluster: a bare checkout would start an empty one of its
    own); with `feed` (a Redis URL), the rows tenants' rules read go to the live feed there, as
    `make run` hands them to the rules job; without, no live feed."""
    from common.runtime.embedded import postgres_url

    workdir = Path(tempfile.mkdtemp(prefix="bench-limiter-"))
    port = brokers._free_port()
    cmd = [sys.executable, "manage.py", "runbroker", "--port", str(port), "--ws-port", "0"]
    cmd += extra
    database = os.environ.get("DATABASE_URL") or postgres_url()
    process = subprocess.Popen(  # runbroker execs the broker: this pid is the broker's
        brokers._pinned(cmd),
        cwd=repo,
        env={
            **{k: v for k, v in os.environ.items() if k not in ("RULES_FEED_URL", "REDIS_URL")},
            "OBJECT_STORE_URL": store_url,
            "DATABASE_URL": database,
            **({"RULES_FEED_URL": feed, "RULES_FEED_KEY": f"rules:bench:{port}"} if feed else {}),
        },
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "stderr.log", "w"),
        preexec_fn=brokers._raise_nofile,
    )
    brokers._wait_port(process, port, f"runbroker ({repo})")
    return RunningBroker(f"runbroker {repo.name}", process, port, workdir)


def add_rules(slugs: list[str]) -> None:
    """One enabled rule per tenant over `bench/pairs/#` (a webhook nobody calls: nothing here
    runs the rules job; what is measured is the broker's side of the rules)."""
    archive._django()
    from tenants.models import Tenant
    from tenants.rules import services as rule_services

    os.environ.setdefault("WEBHOOK_ALLOW", "127.0.0.1")
    for tenant in Tenant.objects.filter(slug__in=slugs):
        rule_services.rule_create(
            tenant=tenant,
            name="hot",
            sql='SELECT payload.seq AS seq FROM "bench/pairs/#" WHERE payload.seq < 0',
            actions=[{"type": "webhook", "url": "http://127.0.0.1:9/hook", "secret": "s" * 16}],
        )


def with_recorder(repo: Path) -> None:
    """The archive's C recorder is built in place by `pip install -e`: give a bare checkout the
    one this checkout built, so that both builds record the same way."""
    for built in (REPO / "data_plane" / "storage").glob("_recorder*.so"):
        target = repo / "data_plane" / "storage" / built.name
        if not target.exists():
            shutil.copy2(built, target)


async def run(base: Path, args: argparse.Namespace, creds: list[tuple[str, str]]) -> list[str]:
    builds = {"A": base, "B": REPO}
    extra = {"A": shlex.split(args.a_args), "B": shlex.split(args.b_args)}
    feeds: dict[str, str | None] = {"A": None, "B": None}
    if args.feed != "none":
        from common.runtime.embedded import redis_url

        url = os.environ.get("REDIS_URL") or redis_url()
        for label in ("A", "B"):
            if args.feed in (label.lower(), "both"):
                feeds[label] = url
    bodies = json_bodies(1024) if args.payload == "json" else None
    stores = archive.Stores("file")
    lines = [
        f"A = {base} {args.a_args}, B = {REPO} {args.b_args}; live feed: {args.feed}; "
        f"{'a rule per tenant reading the pairs; ' if args.rules else ''}"
        f"{args.payload} payloads; pairs across {len(creds)} tenants; "
        f"load average at start {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)"
    ]
    print(lines[0], flush=True)
    for qos in args.qos:
        runs: dict[str, list[scenarios.Result]] = {"A": [], "B": [], "mosquitto": []}
        for label in ("A", "B", "mosquitto", "B", "A", "mosquitto"):
            store_url = stores.new()
            if label == "mosquitto":
                broker, who = brokers.start("mosquitto"), (brokers.USERNAME, brokers.PASSWORD)
            else:
                broker = start_runbroker(builds[label], store_url, extra[label], feeds[label])
                who = creds
            try:
                result = await scenarios.pairs(broker, args.pairs, qos, args.seconds, who, bodies)
            finally:
                broker.stop()
            stores.discard(store_url)
            runs[label].append(result)
            split = ""
            if label != "mosquitto":  # where the broker's CPU went, µs per message by thread
                split = "  | " + ", ".join(
                    f"{name} {us:.2f}"
                    for name, us in sorted(result.cpu_us_by_thread.items(), key=lambda kv: -kv[1])
                )
            print(
                f"  qos={qos} {label:<9} {result.delivered_per_s:>9,.0f} msg/s "
                f"cpu/1k {result.cpu_per_1000:.4f} sent {result.sent:,} received "
                f"{result.received:,}{split}",
                flush=True,
            )
        rate = {k: sum(r.delivered_per_s for r in v) / len(v) for k, v in runs.items()}
        cpu = {k: sum(r.cpu_per_1000 for r in v) / len(v) for k, v in runs.items()}
        lines.append(
            f"pairs n={args.pairs} qos={qos} 1 KiB {args.payload} | A {rate['A']:,.0f} msg/s "
            f"cpu/1k {cpu['A']:.4f} | B {rate['B']:,.0f} msg/s cpu/1k {cpu['B']:.4f} | "
            f"mosquitto {rate['mosquitto']:,.0f} msg/s cpu/1k {cpu['mosquitto']:.4f}\n"
            f"  B/A: throughput {rate['B'] / rate['A']:.3f}x, CPU per message "
            f"{cpu['B'] / cpu['A']:.3f}x | vs Mosquitto (CPU efficiency): A "
            f"{cpu['mosquitto'] / cpu['A']:.2f}x, B {cpu['mosquitto'] / cpu['B']:.2f}x"
        )
        print(lines[-1], flush=True)
    stores.close()
    lines.append(f"load average at end {os.getloadavg()[0]:.1f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="checkout A (B is this one)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--a-args", default="", help="runbroker arguments of A (e.g. --no-journey)")
    parser.add_argument("--b-args", default="", help="runbroker arguments of B")
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--payload", choices=("filler", "json"), default="json")
    parser.add_argument(
        "--qos", type=lambda text: [int(q) for q in text.split(",")], default=[0, 1]
    )
    parser.add_argument(
        "--feed",
        choices=("none", "a", "b", "both"),
        default="none",
        help="which build hands its rules' rows to the live feed (Redis: REDIS_URL, else the "
        "embedded one); e.g. `bench.limiter . --rules --feed b`: the feed's cost, off vs on",
    )
    parser.add_argument(
        "--rules",
        action="store_true",
        help="each tenant with an enabled rule reading every pair's topic (without: tenants "
        "with no rules, whose messages a live feed never touches)",
    )
    args = parser.parse_args(argv)
    base = args.base.resolve()
    with_recorder(base)
    slugs, creds = archive.seed(args.tenants)
    if args.rules:
        add_rules(slugs)
    try:
        lines = asyncio.run(run(base, args, creds))
    finally:
        archive.cleanup(slugs)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
