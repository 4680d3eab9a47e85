"""The cluster on this machine: delivered msg/s with 1 and 2 broker workers, and pairs across
nodes, beside Mosquitto in the same run.

Configurations (each a fresh set of processes; Redis a private `redis-server` in a temp dir):

- `ours 1 worker`: one broker process, no cluster (what `runbroker` runs by default);
- `ours 2 workers`: two processes on one port with SO_REUSEPORT, one cluster on Redis
  (`runbroker --workers 2`): the kernel puts each client on either, so about half the pairs
  cross nodes;
- `ours 2 nodes, all across`: two nodes on two ports, every subscriber on one and every
  publisher on the other: each message crosses the bus (the worst case of forwarding);
- `mosquitto`: single-threaded Mosquitto.

Fan-out (1 publisher → `--fanout` subscribers on one topic) and fan-in (`--fanin` publishers → 1
subscriber) run through bench.scenarios' own scenarios on the one-port setups (1 worker, 2 workers
with SO_REUSEPORT, Mosquitto): with 2 workers the kernel spreads the clients, so a fan-out
crosses once to the other node and about half of a fan-in does.

Then the latency at a fixed rate (QoS 0, 1,000 msg/s over 100 pairs): p50/p99 of publish to
delivery, on one node, across two nodes, and on Mosquitto.

Every broker process is unpinned (the point is the whole machine); the generator is one
process (as bench.compare's). Usage: `python -m bench.cluster [--seconds 10] [--pairs 100]`;
`--write` appends the table to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import scenarios
from bench.brokers import PASSWORD, USERNAME, _free_port, _raise_nofile, _wait_port
from bench.loadgen import (
    PublishTemplate,
    Stats,
    close_all,
    connect_many,
    publish_at_rate,
    publish_flat_out,
)
from bench.report import emit
from bench.scenarios import drain
from common.runtime.processes import data_plane_command

REPO = Path(__file__).resolve().parents[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Setup:
    """The processes of one configuration; `sub_port`/`pub_port` where clients connect."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
        self.processes: list[subprocess.Popen] = []
        self.brokers: list[subprocess.Popen] = []  # whose CPU counts
        self.sub_port = self.pub_port = 0

    def spawn(self, cmd: list[str], broker: bool = True) -> subprocess.Popen:
        process = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / f"stderr-{len(self.processes)}.log", "w"),
            preexec_fn=_raise_nofile,
        )
        self.processes.append(process)
        if broker:
            self.brokers.append(process)
        return process

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.brokers)

    # What bench.scenarios asks of a broker (its fan-out and fan-in run on one port).
    @property
    def port(self) -> int:
        return self.sub_port

    def cpu_seconds(self) -> float:
        return self.cpu()

    def stop(self) -> None:
        stop_processes(self.processes, self.workdir)


def stop_processes(processes: list[subprocess.Popen], workdir: Path) -> None:
    """SIGTERM in reverse start order, wait up to 10 s each (then kill), remove the scratch dir."""
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
    shutil.rmtree(workdir, ignore_errors=True)


def ours(name: str, workers: int, across: bool) -> Setup:
    setup = Setup(name)
    auth = setup.workdir / "tenants.json"
    auth.write_text(
        json.dumps(
            {"tenants": {"bench": {"devices": {"d": {"password": PASSWORD, "client_ids": "any"}}}}}
        )
    )
    extra = ["--sys-interval", "0", "--max-queued", "5000", "--log-level", "WARNING"]
    if workers == 1:
        port = _free_port()
        _wait_port(
            setup.spawn(data_plane_command(port=port, ws_port=0, auth_file=auth, extra=extra)),
            port,
            name,
        )
        setup.sub_port = setup.pub_port = port
        return setup
    redis_port = _free_port()
    redis = setup.spawn(
        [shutil.which("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1"]
        + ["--save", "", "--appendonly", "no", "--dir", str(setup.workdir)],
        broker=False,
    )
    _wait_port(redis, redis_port, "redis")
    cluster = ["--redis-url", f"redis://127.0.0.1:{redis_port}/0", "--cluster-name", "bench"]
    ports = [_free_port(), _free_port()] if across else [_free_port()] * workers
    ws = _free_port()
    for index in range(workers):
        # One tenant: a large one, homed on every worker (tenant affinity would put all its
        # clients on one), so about half the pairs cross as the scenarios mean.
        own = [] if across else ["--reuse-port", "--large-tenants", f"bench={workers}"]
        cmd = data_plane_command(
            port=ports[index],
            ws_port=0 if across else ws,
            auth_file=auth,
            extra=extra + cluster + own,
        )
        _wait_port(setup.spawn(cmd), ports[index], f"{name} worker {index}")
    time.sleep(2)  # both see each other (heartbeat 2 s)
    setup.sub_port, setup.pub_port = ports[0], ports[-1]
    return setup


def mosquitto() -> Setup:
    setup = Setup("mosquitto")
    port = _free_port()
    config = setup.workdir / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        "max_queued_messages 5000\nmax_inflight_messages 0\nlog_type error\n"
    )
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    _wait_port(setup.spawn([binary, "-c", str(config)]), port, "mosquitto")
    setup.sub_port = setup.pub_port = port
    return setup


async def pairs(setup: Setup, n: int, qos: int, seconds: float) -> dict:
    stats = Stats(sample_every=10)
    subs = await connect_many(n, "127.0.0.1", setup.sub_port, stats, "sub", USERNAME, PASSWORD)
    for index, sub in enumerate(subs):
        await sub.subscribe(f"bench/pairs/{index}", qos)
    pubs = await connect_many(n, "127.0.0.1", setup.pub_port, Stats(), "pub", USERNAME, PASSWORD)
    await asyncio.sleep(1.0)  # routes reach the other node (one burst of route changes)
    cpu_before = setup.cpu()
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(
        *(
            publish_flat_out(
                pub, PublishTemplate(f"bench/pairs/{i}", 1024, qos), deadline, stats, 10
            )
            for i, pub in enumerate(pubs)
        )
    )
    elapsed = await drain(stats, stats.sent, 10) - started  # QoS 0 in flight counts too
    cpu = setup.cpu() - cpu_before
    close_all(subs + pubs)
    await asyncio.sleep(0.5)
    return _row(setup, f"pairs n={n} qos={qos}", stats, elapsed, cpu)


async def latency(setup: Setup, n: int, rate: int, seconds: float) -> dict:
    """A fixed total rate over n pairs at QoS 0 (subscribers on `sub_port`, publishers on
    `pub_port`: across nodes for `ours-across`); p50/p99 of publish-to-delivery."""
    stats = Stats()
    subs = await connect_many(n, "127.0.0.1", setup.sub_port, stats, "lsub", USERNAME, PASSWORD)
    for index, sub in enumerate(subs):
        await sub.subscribe(f"bench/lat/{index}", 0)
    pubs = await connect_many(n, "127.0.0.1", setup.pub_port, Stats(), "lpub", USERNAME, PASSWORD)
    await asyncio.sleep(1.0)  # routes reach the other node
    templates = [PublishTemplate(f"bench/lat/{i}", 1024, 0) for i in range(n)]
    cpu_before = setup.cpu()
    await publish_at_rate(pubs, templates, rate, seconds, stats)
    await drain(stats, stats.sent, 2)
    cpu = setup.cpu() - cpu_before
    close_all(subs + pubs)
    await asyncio.sleep(0.5)
    return _row(setup, f"latency n={n} {rate}/s qos=0", stats, seconds, cpu)


async def fan(setup: Setup, kind: str, n: int, qos: int, seconds: float) -> dict:
    """bench.scenarios' fan-out or fan-in on this setup, as a row of this table."""
    run = scenarios.fanout if kind == "fanout" else scenarios.fanin
    result = await run(setup, n, qos, seconds, settle=1.0)  # routes reach the other node
    await asyncio.sleep(0.5)
    return {
        "setup": setup.name,
        "scenario": result.scenario,
        "delivered": result.delivered_per_s,
        "p50": result.p50_ms,
        "p99": result.p99_ms,
        "loss": result.loss,
        "cpu_per_1k": result.cpu_per_1000,
    }


def _row(setup: Setup, scenario: str, stats: Stats, seconds: float, cpu: float) -> dict:
    """One line of the results table: delivered msg/s over `seconds`, latency percentiles,
    loss, and the brokers' CPU seconds per 1,000 delivered."""
    return {
        "setup": setup.name,
        "scenario": scenario,
        "delivered": stats.received / seconds,
        "p50": stats.percentile(0.5),
        "p99": stats.percentile(0.99),
        "loss": stats.sent - stats.received,
        "cpu_per_1k": cpu / max(stats.received, 1) * 1000,
    }


SETUPS = {
    "ours-1": lambda: ours("ours 1 worker", 1, False),
    "ours-2": lambda: ours("ours 2 workers (SO_REUSEPORT)", 2, False),
    "ours-across": lambda: ours("ours 2 nodes, all pairs across", 2, True),
    "mosquitto": mosquitto,
}


def _show(row: dict) -> None:
    print(
        f"{row['scenario']:20} {row['setup']:34} {row['delivered']:>9,.0f} msg/s"
        f"  p50 {row['p50']:>8.2f} ms  p99 {row['p99']:>8.2f} ms  loss {row['loss']:>7}"
        f"  cpu/1k {row['cpu_per_1k']:.4f}",
        flush=True,
    )


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--qos", default="0,1")
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--rate", type=int, default=1000, help="latency: messages/s in total")
    parser.add_argument("--fanout", type=int, default=100, help="subscribers; 0: no fan-out")
    parser.add_argument("--fanin", type=int, default=100, help="publishers; 0: no fan-in")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--write", action="store_true", help="append the table to RESULTS.md")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rows = []
    started = time.time()
    for qos in [int(q) for q in args.qos.split(",")]:
        for key in args.setups.split(","):
            setup = SETUPS[key]()
            try:
                row = await pairs(setup, args.pairs, qos, args.seconds)
            finally:
                setup.stop()
            _show(row)
            rows.append(row)
    for kind, n in (("fanout", args.fanout), ("fanin", args.fanin)):
        for qos in [int(q) for q in args.qos.split(",")] if n else []:
            for key in args.setups.split(","):
                if key == "ours-across":
                    continue  # one port per scenario: the kernel spreads the clients
                setup = SETUPS[key]()
                try:
                    row = await fan(setup, kind, n, qos, args.seconds)
                finally:
                    setup.stop()
                _show(row)
                rows.append(row)
    if not args.no_latency:
        for key in args.setups.split(","):
            if key == "ours-2":
                continue  # half the pairs cross: between the other two
            setup = SETUPS[key]()
            try:
                row = await latency(setup, args.pairs, args.rate, args.seconds)
            finally:
                setup.stop()
            rows.append(row)
            print(
                f"{row['scenario']:20} {row['setup']:34} p50 {row['p50']:.2f} ms"
                f"  p99 {row['p99']:.2f} ms  loss {row['loss']}",
                flush=True,
            )
    command = "python -m bench.cluster " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        "",
        "## Cluster: 1 vs 2 workers (pairs, fan-out, fan-in), pairs across nodes, beside Mosquitto",
        "",
        f"Command: `{command.strip()}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; took {time.time() - started:.0f} s  ",
        f"Machine: {os.cpu_count()} cores, shared with other jobs running at the same time (noisy:"
        " read the figures as rough), nothing pinned; one generator process.",
        "",
        "| scenario | setup | delivered msg/s | p50 ms | p99 ms | loss | broker CPU s/1k msgs |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['scenario']} | {row['setup']} | {row['delivered']:,.0f} | {row['p50']:.2f} |"
            f" {row['p99']:.2f} | {row['loss']} | {row['cpu_per_1k']:.4f} |"
        )
    emit(lines, args.write)


if __name__ == "__main__":
    import uvloop

    uvloop.install()
    asyncio.run(main())
