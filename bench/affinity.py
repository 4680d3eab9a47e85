"""Tenant-affine workers (issue 34): CPU per message of 2 workers against 1, Redis included, at a
fixed rate, with pairs spread over tenants.

    .venv/bin/python -m bench.affinity [--rate 20000] [--tenants 20] [--pairs 100]
        [--seconds 8] [--qos 0,1] [--base /path/to/base/checkout] [--write]

Each run is a fresh set of processes on a static tenants file (`--tenants` tenants, one device
each), no archive, no $SYS; 1 KiB device-telemetry JSON (`loadgen.json_bodies`); `--pairs`
pairs (publisher and subscriber of one topic, both of one tenant), pair i in tenant i mod
`--tenants`; every client connects to the one port, so with 2 workers the kernel places it
(SO_REUSEPORT). The publishers together send `--rate` msg/s (QoS 1: packet ids, PUBACKs
counted, no window) for `--seconds`. Setups:

- `1 worker`: one process, no cluster (what `runbroker` runs with one worker);
- `2 workers, blind`: `runbroker --workers 2` as before tenant affinity (`--no-affinity`, or
  the `--base` checkout's own broker): about half of each tenant's pairs cross workers through
  Redis;
- `2 workers, affine`: each client handed at CONNECT to its tenant's home worker.

The CPU is the broker processes' and Redis' (user + system from /proc) while the messages
flow; the table gives it per 1,000 delivered messages and as a ratio to 1 worker (the issue's
target: 2 workers ≤ 1.15× one), with the share of messages forwarded between workers (their
`mqtt_cluster_forwarded_messages`). The order 1, blind, affine, affine, blind, 1 cancels a drift
in the machine's load; each figure is the mean of its two runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.brokers import PASSWORD, _free_port, _raise_nofile, _wait_port
from bench.cluster import cpu_seconds, stop_processes
from bench.loadgen import PublishTemplate, Stats, close_all, connect_many, json_bodies
from bench.report import emit
from bench.scenarios import drain
from common.runtime.processes import data_plane_command

REPO = Path(__file__).resolve().parents[1]


class Setup:
    """One configuration's processes; `counted`: whose CPU is the figure (brokers, Redis)."""

    def __init__(self, name: str, workers: int, repo: Path, extra: list[str], tenants: int):
        self.name, self.workers, self.repo = name, workers, repo
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-affinity-"))
        self.processes: list[subprocess.Popen] = []
        self.metrics: list[int] = []
        auth = self.workdir / "tenants.json"
        devices = {"d": {"password": PASSWORD, "client_ids": "any"}}
        auth.write_text(
            json.dumps({"tenants": {f"t{i:02d}": {"devices": devices} for i in range(tenants)}})
        )
        self.port = _free_port()
        base = ["--sys-interval", "0", "--max-queued", "5000", "--log-level", "WARNING"]
        base += ["--no-archive"]
        if workers == 1:
            self._spawn(data_plane_command(port=self.port, ws_port=0, auth_file=auth, extra=base))
            return
        redis_port = _free_port()
        redis = self._spawn(
            [shutil.which("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
            wait=redis_port,
        )
        assert redis.poll() is None
        ws = _free_port()
        for slot in range(workers):
            metrics = _free_port()
            self.metrics.append(metrics)
            own = ["--reuse-port", "--redis-url", f"redis://127.0.0.1:{redis_port}/0"]
            own += ["--cluster-name", "bench", "--metrics-port", str(metrics)]
            if repo == REPO and "--no-affinity" not in extra:  # a base checkout has no slots
                own += ["--worker-slot", str(slot)]
            cmd = data_plane_command(port=self.port, ws_port=ws, auth_file=auth)
            self._spawn(cmd + base + own + extra, wait=metrics)
        time.sleep(2.5)  # each sees the other (heartbeat 2 s): placement needs both

    def _spawn(self, cmd: list[str], wait: int | None = None) -> subprocess.Popen:
        process = subprocess.Popen(
            cmd,
            cwd=self.repo,
            stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / f"stderr-{len(self.processes)}.log", "w"),
            preexec_fn=_raise_nofile,
        )
        self.processes.append(process)
        _wait_port(process, wait or self.port, self.name)
        return process

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.processes)

    def forwarded(self) -> int:
        total = 0
        for port in self.metrics:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            found = re.search(rb"^mqtt_cluster_forwarded_messages_total (\S+)$", text, re.M)
            total += int(float(found.group(1))) if found else 0
        return total

    def stop(self) -> None:
        stop_processes(self.processes, self.workdir)


async def publish_at_rate(clients, templates, rate: int, seconds: float, stats: Stats) -> None:
    """A fixed total `rate` in ticks of 10 ms, round robin; QoS 1 with packet ids (the
    clients count the PUBACKs), no window: the rate is the rate."""
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    started = next_at = time.perf_counter()
    index, n = 0, len(clients)
    ids = [0] * n
    while time.perf_counter() - started < seconds:
        for _ in range(per_tick):
            i = index % n
            template = templates[i]
            if template.qos:
                ids[i] = ids[i] % 65535 + 1
                clients[i].inflight += 1
            clients[i].transport.write(template.packet(ids[i]))
            stats.sent += 1
            index += 1
        next_at += tick
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))


async def measure(setup: Setup, args, qos: int) -> dict:
    stats = Stats(sample_every=50)
    logins = [(f"t{i:02d}/d", PASSWORD) for i in range(args.tenants)]
    subs = await connect_many(args.pairs, "127.0.0.1", setup.port, stats, "s", None, None,
                              logins=logins)  # fmt: skip
    for index, sub in enumerate(subs):
        await sub.subscribe(f"p/{index}", qos)
    pubs = await connect_many(args.pairs, "127.0.0.1", setup.port, Stats(), "p", None, None,
                              logins=logins)  # fmt: skip
    await asyncio.sleep(1.5)  # routes reach the other worker
    bodies = json_bodies(1024)
    templates = [
        PublishTemplate(f"p/{i}", 1024, qos, bodies, start=i * 37) for i in range(args.pairs)
    ]
    forwarded = setup.forwarded()
    cpu = setup.cpu()
    await publish_at_rate(pubs, templates, args.rate, args.seconds, stats)
    await drain(stats, stats.sent, 5)
    cpu = setup.cpu() - cpu
    forwarded = setup.forwarded() - forwarded
    close_all(subs + pubs)
    await asyncio.sleep(0.3)
    return {
        "delivered": stats.received / args.seconds,
        "lost": stats.sent - stats.received,  # not delivered within the 5 s drain
        "cpu_per_1k": cpu / max(stats.received, 1) * 1000,
        "crossing": forwarded / max(stats.received, 1),
        "p99": stats.percentile(0.99),
    }


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=20000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--qos", default="0,1")
    parser.add_argument("--base", type=Path, help="checkout whose broker runs the blind setup")
    parser.add_argument("--write", action="store_true", help="append the table to RESULTS.md")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    blind_repo = args.base.resolve() if args.base else REPO
    blind_extra = [] if args.base else ["--no-affinity"]
    setups = {
        "1 worker": lambda: Setup("1 worker", 1, REPO, [], args.tenants),
        "2 workers, blind": lambda: Setup("2 blind", 2, blind_repo, blind_extra, args.tenants),
        "2 workers, affine": lambda: Setup("2 affine", 2, REPO, [], args.tenants),
    }
    order = ["1 worker", "2 workers, blind", "2 workers, affine"]
    order += order[::-1]
    started, load = time.time(), [os.getloadavg()[0]]
    rows = []
    for qos in [int(q) for q in args.qos.split(",")]:
        runs: dict[str, list[dict]] = {name: [] for name in setups}
        for name in order:
            setup = setups[name]()
            try:
                result = await measure(setup, args, qos)
            finally:
                setup.stop()
            runs[name].append(result)
            print(
                f"qos={qos} {name:18} {result['delivered']:>8,.0f} msg/s  lost {result['lost']:>6}"
                f"  cpu/1k {result['cpu_per_1k']:.4f}  crossing {result['crossing']:.0%}"
                f"  p99 {result['p99']:.1f} ms  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        one = sum(r["cpu_per_1k"] for r in runs["1 worker"]) / 2
        for name, results in runs.items():
            mean = {key: sum(r[key] for r in results) / len(results) for key in results[0]}
            rows.append((qos, name, mean, mean["cpu_per_1k"] / one))
        load.append(os.getloadavg()[0])
    base = f", blind = {args.base}" if args.base else ", blind = this checkout --no-affinity"
    lines = [
        "",
        f"## Tenant-affine workers: CPU per message, 2 workers vs 1 (issue 34{base})",
        "",
        f"Command: `python -m bench.affinity {' '.join(argv if argv is not None else sys.argv[1:])}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; took "
        f"{time.time() - started:.0f} s; {os.cpu_count()} cores shared with other jobs (load "
        f"average {' → '.join(f'{x:.1f}' for x in load)}): read the figures as rough.",
        "",
        "| QoS | setup | delivered msg/s | not delivered 5 s after | CPU s/1k msgs (brokers + Redis) | × 1 worker |"
        " share crossing workers | p99 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for qos, name, mean, ratio in rows:
        lines.append(
            f"| {qos} | {name} | {mean['delivered']:,.0f} | {mean['lost']:,.0f} |"
            f" {mean['cpu_per_1k']:.4f} | {ratio:.2f} | {mean['crossing']:.0%} | {mean['p99']:.1f} |"
        )
    emit(lines, args.write)


if __name__ == "__main__":
    import uvloop

    uvloop.install()
    asyncio.run(main())
