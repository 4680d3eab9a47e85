"""Where QoS 0 traffic that crosses nodes is lost under overload, and how fast it goes: two
nodes on two ports (every subscriber on one, every publisher on the other: each message crosses
the bus), each with its `/metrics`, then the loss taken apart from the nodes' own counters.

    .venv/bin/python -m bench.cluster_loss [--seconds 4] [--fanin 100] [--pairs 10]
        [--slow1 10] [--slow PAIRS SLOW] [--repo /path/to/other/checkout ...]

`--slow1 10`: ten pairs, the first pair's subscriber reading 2 ms in every 502 ms; `--slow 10 4`:
ten pairs, the first four subscribers slow that way, taking turns (what subscribers that back up
one after another, as an attacker's would, do to everyone else's intake on their node).

Each `--repo` (default: this checkout) runs as `python -m data_plane` from its own directory
with this virtualenv (as bench.ab_builds), so two builds compare in one run (A, B, B, A when
two are given: a drift in machine load cancels out).

Per run: what the publishers wrote, what the subscriber(s) received, and from the metrics:
received at the publishers' node, forwarded on the bus, dropped by the bus (`backlog`,
`bus_unavailable`), received by the subscribers' node from its stream, lost before read
(`stream_gap`), dropped at the subscribers' sessions (queue full), and the Redis stream's length
at its peak (sampled) — what the bus holds while the reader is behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.brokers import PASSWORD, REPO, USERNAME, _free_port, _raise_nofile, _wait_port
from bench.cluster import stop_processes
from bench.loadgen import PublishTemplate, Stats, close_all, connect_many, publish_flat_out
from bench.scenarios import drain
from common.runtime.processes import data_plane_command


class TwoNodes:
    """Redis and two broker nodes of one cluster, on two ports, with metrics."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-xloss-"))
        self.processes: list[subprocess.Popen] = []
        auth = self.workdir / "tenants.json"
        auth.write_text(
            json.dumps(
                {
                    "tenants": {
                        "bench": {"devices": {"d": {"password": PASSWORD, "client_ids": "any"}}}
                    }
                }
            )
        )
        self.redis_port = _free_port()
        redis = self._spawn(
            [shutil.which("redis-server"), "--port", str(self.redis_port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        )
        _wait_port(redis, self.redis_port, "redis")
        self.ports = [_free_port(), _free_port()]
        self.metrics = [_free_port(), _free_port()]
        extra = ["--sys-interval", "0", "--max-queued", "5000", "--log-level", "WARNING"]
        extra += ["--redis-url", f"redis://127.0.0.1:{self.redis_port}/0"]
        extra += ["--cluster-name", "bench"]
        for port, metrics in zip(self.ports, self.metrics, strict=True):
            cmd = data_plane_command(
                port=port, ws_port=0, auth_file=auth, extra=[*extra, "--metrics-port", str(metrics)]
            )
            _wait_port(self._spawn(cmd), port, f"node on {port}")
        time.sleep(2.5)  # both see each other (heartbeat 2 s)
        self.sub_port, self.pub_port = self.ports

    def _spawn(self, cmd: list[str]) -> subprocess.Popen:
        process = subprocess.Popen(
            cmd,
            cwd=self.repo,
            stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / f"stderr-{len(self.processes)}.log", "w"),
            preexec_fn=_raise_nofile,
        )
        self.processes.append(process)
        return process

    def scrape(self, index: int) -> dict[str, float]:
        """The node's metrics as {name{labels}: value} (the tenant label dropped)."""
        url = f"http://127.0.0.1:{self.metrics[index]}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.startswith("mqtt_"):
                continue
            name, value = line.rsplit(" ", 1)
            name = re.sub(r'tenant="[^"]*",?', "", name).replace("{}", "")
            out[name] = out.get(name, 0.0) + float(value)
        return out

    def stream_length(self) -> int:
        """The subscribers' node's forward stream: entries not trimmed yet (each a batch)."""
        cli = shutil.which("redis-cli")
        keys = subprocess.run(
            [cli, "-p", str(self.redis_port), "--scan", "--pattern", "*stream*"],
            capture_output=True,
            text=True,
        ).stdout.split()
        total = 0
        for key in keys:
            answer = subprocess.run(
                [cli, "-p", str(self.redis_port), "xlen", key], capture_output=True, text=True
            ).stdout.strip()
            total += int(answer) if answer.isdigit() else 0
        return total

    def stop(self) -> None:
        stop_processes(self.processes, self.workdir)


async def run(nodes: TwoNodes, kind: str, n: int, seconds: float, slow_count: int = 1) -> dict:
    """Fan-in (n publishers → 1 subscriber), n pairs, or n pairs of which the first
    `slow_count` subscribers each read 2 ms in every 502, taking turns (`slow`: what slow
    subscribers do to the others), QoS 0, every message across."""
    stats = Stats(sample_every=10)
    slow = Stats()  # the slow pairs', apart
    creds = (USERNAME, PASSWORD)
    if kind == "slow":
        subs = await connect_many(slow_count, "127.0.0.1", nodes.sub_port, slow, "xslow", *creds)
        subs += await connect_many(
            n - slow_count, "127.0.0.1", nodes.sub_port, stats, "xsub", *creds
        )
    else:
        subs = await connect_many(1 if kind == "fanin" else n, "127.0.0.1", nodes.sub_port,
                                  stats, "xsub", *creds)  # fmt: skip
    for index, sub in enumerate(subs):
        await sub.subscribe("bench/x/#" if kind == "fanin" else f"bench/x/{index}", 0)
    pubs = await connect_many(n, "127.0.0.1", nodes.pub_port, Stats(), "xpub", *creds)
    await asyncio.sleep(1.0)  # routes reach the other node
    peak = 0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, await asyncio.to_thread(nodes.stream_length))
            await asyncio.sleep(0.25)

    async def crawl(sub, phase: float) -> None:  # 2 ms in every 502, a small socket buffer
        sock = sub.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        await asyncio.sleep(phase)  # the slow ones take turns: each backs up at its own time
        while not done.is_set():
            sub.transport.pause_reading()
            await asyncio.sleep(0.5)
            sub.transport.resume_reading()
            await asyncio.sleep(0.002)

    sampler = asyncio.create_task(sample())
    crawlers = [
        asyncio.create_task(crawl(subs[i], 0.5 * i / slow_count))
        for i in range(slow_count if kind == "slow" else 0)
    ]
    started = time.perf_counter()
    deadline = started + seconds
    window = 2 if kind == "fanin" else 10
    await asyncio.gather(
        *(
            publish_flat_out(
                pub,
                PublishTemplate(f"bench/x/{i}", 1024, 0),
                deadline,
                slow if kind == "slow" and i < slow_count else stats,
                window,
            )
            for i, pub in enumerate(pubs)
        )
    )
    elapsed = await drain(stats, stats.sent, 15) - started
    done.set()
    await sampler
    if crawlers:
        await asyncio.gather(*crawlers)
        for sub in subs[:slow_count]:
            sub.transport.resume_reading()
        await drain(slow, slow.sent, 5)
    close_all(subs + pubs)
    await asyncio.sleep(0.5)
    sub_node, pub_node = nodes.scrape(0), nodes.scrape(1)
    return {
        "scenario": f"{kind} n={n}" + (f" slow={slow_count}" if kind == "slow" else ""),
        "sent": stats.sent,
        "received": stats.received,
        "delivered_per_s": stats.received / elapsed,
        "loss": stats.sent - stats.received,
        "latency_p50_ms": stats.percentile(0.5),
        "latency_p99_ms": stats.percentile(0.99),
        "pub_node_received": pub_node.get("mqtt_messages_received_total", 0),
        "forwarded": pub_node.get("mqtt_cluster_forwarded_messages_total", 0),
        "bus_dropped": sum(
            v for k, v in pub_node.items() if k.startswith("mqtt_cluster_forward_dropped")
        ),
        "sub_node_from_stream": sub_node.get("mqtt_cluster_received_messages_total", 0),
        "stream_gap": sub_node.get('mqtt_cluster_forward_dropped_total{reason="stream_gap"}', 0),
        "session_dropped": sub_node.get("mqtt_messages_dropped_total", 0),
        "stream_peak_entries": peak,
        **({"slow_sent": slow.sent, "slow_received": slow.received} if kind == "slow" else {}),
        "destination_backlogs": pub_node.get("mqtt_cluster_destination_backlogs_total", 0),
        "stream_holds": sum(
            v for k, v in sub_node.items() if k.startswith("mqtt_cluster_stream_holds_total")
        ),
        "held_s": sub_node.get("mqtt_cluster_stream_held_seconds_total", 0),
        "stream_holds_expired": sub_node.get('mqtt_cluster_stream_holds_total{end="expired"}', 0),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--fanin", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--slow1", type=int, default=0, help="pairs, the first one slow")
    parser.add_argument(
        "--slow", type=int, nargs=2, metavar=("PAIRS", "SLOW"), default=(0, 0),
        help="pairs, the first SLOW of them slow, taking turns",
    )  # fmt: skip
    parser.add_argument("--repo", type=Path, action="append")
    args = parser.parse_args()
    repos = [r.resolve() for r in args.repo] if args.repo else [REPO]
    order = repos if len(repos) == 1 else [repos[0], repos[1], repos[1], repos[0]]
    print(f"load average at start {os.getloadavg()[0]:.1f}", flush=True)
    runs = [
        ("fanin", args.fanin, 1),
        ("pairs", args.pairs, 1),
        ("slow", args.slow1, 1),
        ("slow", args.slow[0], args.slow[1]),
    ]
    for kind, n, slow_count in runs:
        if not n:
            continue
        for repo in order:
            nodes = TwoNodes(repo)
            try:
                row = await run(nodes, kind, n, args.seconds, slow_count)
            finally:
                nodes.stop()
            print(f"{repo.name:14} " + " ".join(f"{k}={_fmt(v)}" for k, v in row.items()),
                  flush=True)  # fmt: skip
    print(f"load average at end {os.getloadavg()[0]:.1f}", flush=True)


def _fmt(value: object) -> str:
    return f"{value:,.0f}" if isinstance(value, float | int) else str(value)


if __name__ == "__main__":
    import uvloop

    uvloop.install()
    asyncio.run(main())
