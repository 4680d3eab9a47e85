"""The multi-core scenario of issue 34, prepared as one run for a machine with many cores: our
broker with 1, 2, 4 and 8 tenant-affine workers beside Mosquitto, flat out, the generator in
processes of its own on cores apart from the brokers'.

    .venv/bin/python -m bench.multicore [--workers 1,2,4,8] [--pairs 1000] [--tenants 100]
        [--generators 7] [--generator-cores 0-6] [--broker-cores 7-15] [--seconds 10]
        [--qos 0,1] [--big-tenant] [--write]

Per setup (a fresh set of processes: `bench.affinity.Setup`, a static tenants file, no archive,
no $SYS, Redis for 2 workers and more; Mosquitto alone), `--pairs` pairs of one topic each,
pair i in tenant i mod `--tenants` (`--big-tenant`: a second case, every pair in one tenant,
spread over every worker, `--large-tenants t00=N`). `--generators` processes (`--generate`,
pinned to `--generator-cores`) each connect their share of the pairs, wait for the start, publish
1 KiB device JSON flat out for `--seconds` (QoS 1: 20 in flight a publisher, as paho's default)
and count what their subscribers receive. The brokers and Redis are pinned to `--broker-cores`.

Reported: delivered msg/s, the brokers' and Redis' CPU per 1,000 delivered (from /proc), the
share of messages forwarded between workers, the ratio to Mosquitto's msg/s and the scaling
efficiency (msg/s over N × one worker's). The issue's targets: 8 workers ≥ 6× Mosquitto and ≥ 85 %
efficiency over one worker. On a 2-core machine run it small to check it works
(`--workers 1,2 --pairs 20 --tenants 4 --generators 1 --generator-cores 0 --broker-cores 1
--seconds 2`); its figures mean nothing there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.affinity import REPO, Setup
from bench.brokers import PASSWORD
from bench.brokers import start as start_broker
from bench.loadgen import (
    PublishTemplate,
    Stats,
    close_all,
    connect_many,
    json_bodies,
    publish_flat_out,
)
from bench.report import emit
from bench.scenarios import drain

WINDOW = 20  # QoS 1 publishes in flight a publisher: paho's default


def cores(text: str) -> set[int]:
    """`0-6,9` → {0, …, 6, 9}."""
    found: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def pin(pid: int, allowed: set[int]) -> None:
    """Every thread of the process onto `allowed` (threads it starts later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), allowed)
        except (ProcessLookupError, OSError):
            pass  # the thread ended meanwhile


# -- a generator process ---------------------------------------------------------------------


async def generate(spec: dict) -> dict:
    """One generator's pairs: connect, say ready, wait for the go (a line on stdin), publish flat
    out for `seconds`, drain, report."""
    stats = Stats(sample_every=1000)
    pairs = spec["pairs"]
    logins = [(f"{t}/d", PASSWORD) for t in spec["tenants"]]
    port, qos = spec["port"], spec["qos"]
    subs = await connect_many(len(pairs), "127.0.0.1", port, stats, f"s{spec['index']}",
                              None, None, logins=logins)  # fmt: skip
    for sub, pair in zip(subs, pairs, strict=True):
        await sub.subscribe(f"p/{pair}", qos)
    pubs = await connect_many(len(pairs), "127.0.0.1", port, Stats(), f"p{spec['index']}",
                              None, None, logins=logins)  # fmt: skip
    bodies = json_bodies(1024)
    templates = [PublishTemplate(f"p/{pair}", 1024, qos, bodies, start=pair * 37) for pair in pairs]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    deadline = time.perf_counter() + spec["seconds"]
    await asyncio.gather(
        *(
            publish_flat_out(c, t, deadline, stats, WINDOW)
            for c, t in zip(pubs, templates, strict=True)
        )
    )
    received_in_time = stats.received
    await drain(stats, stats.sent, 5)
    close_all(subs + pubs)
    return {"sent": stats.sent, "received": received_in_time, "drained": stats.received}


# -- the coordinator -------------------------------------------------------------------------


class Mosquitto:
    """`bench.brokers`' Mosquitto, in the shape of `bench.affinity.Setup`."""

    def __init__(self) -> None:
        self.broker = start_broker("mosquitto", max_queued=5000)
        self.port, self.processes = self.broker.port, [self.broker.process]

    def cpu(self) -> float:
        return self.broker.cpu_seconds()

    def forwarded(self) -> int:
        return 0  # one process: nothing crosses

    def stop(self) -> None:
        self.broker.stop()


def run_once(setup, args, qos: int, tenants: list[str]) -> dict:
    broker_cores = cores(args.broker_cores)
    for process in setup.processes:
        pin(process.pid, broker_cores)
    generators = []
    for index in range(args.generators):
        spec = {
            "index": index,
            "port": setup.port,
            "qos": qos,
            "seconds": args.seconds,
            "pairs": list(range(index, args.pairs, args.generators)),
            "tenants": [
                tenants[p % len(tenants)] for p in range(index, args.pairs, args.generators)
            ],
        }
        command = [sys.executable, "-m", "bench.multicore", "--generate", json.dumps(spec)]
        command = ["taskset", "-c", args.generator_cores, *command]
        generators.append(
            subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
    for generator in generators:
        assert generator.stdout.readline().strip() == "ready", "a generator did not connect"
    time.sleep(1.5)  # routes reach the other workers
    before_cpu = setup.cpu()
    before_forwarded = setup.forwarded()
    for generator in generators:
        generator.stdin.write("go\n")
        generator.stdin.flush()
    time.sleep(args.seconds)
    cpu = setup.cpu() - before_cpu
    moved = setup.forwarded() - before_forwarded
    reports = [
        json.loads(g.communicate(timeout=60)[0].strip().splitlines()[-1]) for g in generators
    ]
    received = sum(r["received"] for r in reports)
    return {
        "delivered": received / args.seconds,
        "sent": sum(r["sent"] for r in reports),
        "lost": sum(r["sent"] - r["drained"] for r in reports),
        "cpu_per_1k": cpu / max(received, 1) * 1000,
        "crossing": moved / max(received, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--generate", help=argparse.SUPPRESS)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--generators", type=int, default=7)
    parser.add_argument("--generator-cores", default="0-6")
    parser.add_argument("--broker-cores", default="7-15")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--qos", default="0,1")
    parser.add_argument("--big-tenant", action="store_true", help="also every pair in one tenant")
    parser.add_argument("--write", action="store_true", help="append the table to RESULTS.md")
    args = parser.parse_args(argv)
    if args.generate:
        import uvloop

        print(json.dumps(uvloop.run(generate(json.loads(args.generate)))), flush=True)
        return
    started, load = time.time(), os.getloadavg()[0]
    cases = [(f"{args.tenants} tenants", args.tenants)] + (
        [("one big tenant", 1)] if args.big_tenant else []
    )
    rows = []
    for case, tenant_count in cases:
        tenants = [f"t{i:02d}" for i in range(tenant_count)]
        for qos in [int(q) for q in args.qos.split(",")]:
            results: dict[str, dict] = {}
            labels = [f"{n} worker{'s' if n != '1' else ''}" for n in args.workers.split(",")]
            for name in ["mosquitto", *labels]:
                if name == "mosquitto":
                    setup = Mosquitto()
                else:
                    workers = int(name.split()[0])
                    extra = ["--large-tenants", f"t00={workers}"] if tenant_count == 1 else []
                    setup = Setup(name, workers, REPO, extra, tenant_count)
                try:
                    result = run_once(setup, args, qos, tenants)
                finally:
                    setup.stop()
                results[name] = result
                print(
                    f"{case} qos={qos} {name:10} {result['delivered']:>10,.0f} msg/s"
                    f"  lost {result['lost']:>6}  cpu/1k {result['cpu_per_1k']:.4f}"
                    f"  crossing {result['crossing']:.0%}",
                    flush=True,
                )
            mosquitto = results.pop("mosquitto")
            one = results.get("1 worker", {}).get("delivered")
            for name, result in results.items():
                workers = int(name.split()[0])
                efficiency = result["delivered"] / (workers * one) if one else float("nan")
                ratio = result["delivered"] / mosquitto["delivered"]
                rows.append((case, qos, name, result, ratio, efficiency))
            rows.append((case, qos, "mosquitto", mosquitto, 1.0, float("nan")))
    lines = [
        "",
        "## Multi-core scenario (issue 34): workers beside Mosquitto",
        "",
        f"Command: `python -m bench.multicore {' '.join(argv if argv is not None else sys.argv[1:])}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores; took "
        f"{time.time() - started:.0f} s; load average at the start {load:.1f}.",
        "",
        "| case | QoS | setup | delivered msg/s | × Mosquitto | scaling efficiency |"
        " CPU s/1k msgs | crossing workers | not delivered |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case, qos, name, result, ratio, efficiency in rows:
        lines.append(
            f"| {case} | {qos} | {name} | {result['delivered']:,.0f} | {ratio:.2f} |"
            f" {'' if efficiency != efficiency else f'{efficiency:.0%}'} |"
            f" {result['cpu_per_1k']:.4f} | {result['crossing']:.0%} | {result['lost']:,} |"
        )
    emit(lines, args.write)


if __name__ == "__main__":
    main()
