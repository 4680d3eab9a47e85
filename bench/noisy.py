"""A noisy neighbour (issue 28): one tenant's QoS 0 flood and connection churn beside another
tenant's steady traffic; the victim's publish-to-delivery latency, before and during.

    .venv/bin/python -m bench.noisy [/path/to/base/checkout] [--seconds 6] [--flooders 50]

The broker is `manage.py runbroker` on Postgres with everything on (`bench.limiter`'s
`start_runbroker`; the tenants seeded as `bench.archive` does: ACLs, quotas high enough never to
hold anyone). The victim (10 pairs, 200 msg/s in all, QoS 0, 1 KiB) runs in its own process at a
higher scheduling priority, so that what it measures is the broker, not the generator beside it;
the neighbour (`--flooders` pairs flat out at QoS 0, and 20 connections opened and closed in a
loop) in another. Per build (A the base checkout if given, B this one; A-B-B-A): the victim's
p50/p99 alone, then under the neighbour, and what the neighbour got through meanwhile
(deliveries and connections per second: what holding it to its share costs it).
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

from bench import archive
from bench.brokers import REPO
from bench.limiter import start_runbroker, with_recorder
from bench.loadgen import (
    PublishTemplate,
    Stats,
    close_all,
    connect,
    connect_many,
    publish_at_rate,
    publish_flat_out,
)


async def victim(port: int, login: list[str], seconds: float) -> dict:
    stats = Stats()
    subs = await connect_many(10, "127.0.0.1", port, stats, "vsub", *login)
    for index, sub in enumerate(subs):
        await sub.subscribe(f"bench/pairs/victim/{index}", 0)
    pubs = await connect_many(10, "127.0.0.1", port, Stats(), "vpub", *login)
    templates = [PublishTemplate(f"bench/pairs/victim/{i}", 1024, 0) for i in range(10)]
    await publish_at_rate(pubs, templates, 200, seconds, stats)
    await asyncio.sleep(1)
    close_all(subs + pubs)
    return {
        "p50_ms": round(stats.percentile(0.5), 2),
        "p99_ms": round(stats.percentile(0.99), 2),
        "lost": stats.sent - stats.received,
    }


async def neighbour(port: int, login: list[str], seconds: float, flooders: int) -> dict:
    """Flooding for `seconds`; what it got through (messages delivered to its subscribers per
    second, connections opened and closed): what fairness costs the neighbour."""
    stats = Stats(sample_every=1000)
    subs = await connect_many(flooders, "127.0.0.1", port, stats, "nsub", *login)
    for index, sub in enumerate(subs):
        await sub.subscribe(f"bench/pairs/noise/{index}", 0)
    pubs = await connect_many(flooders, "127.0.0.1", port, Stats(), "npub", *login)
    started = time.perf_counter()
    deadline = started + seconds
    churned = [0]

    async def churn() -> None:
        while time.perf_counter() < deadline:
            clients = [
                await connect("127.0.0.1", port, Stats(), f"churn-{n}", *login) for n in range(20)
            ]
            close_all(clients)
            churned[0] += len(clients)

    await asyncio.gather(
        churn(),
        *(
            publish_flat_out(
                pub, PublishTemplate(f"bench/pairs/noise/{i}", 1024, 0), deadline, stats, 10
            )
            for i, pub in enumerate(pubs)
        ),
    )
    close_all(subs + pubs)
    elapsed = time.perf_counter() - started
    return {
        "delivered_per_s": round(stats.received / elapsed),
        "connects_per_s": round(churned[0] / elapsed, 1),
    }


def role(argv: list[str]) -> None:
    """In a child process: `victim PORT USER PASSWORD SECONDS` or `neighbour … FLOODERS`."""
    kind, port, user, password, seconds = argv[:5]
    if kind == "victim":
        print(json.dumps(asyncio.run(victim(int(port), [user, password], float(seconds)))))
    else:
        got = asyncio.run(neighbour(int(port), [user, password], float(seconds), int(argv[5])))
        print(json.dumps(got))


def child(*args: str, nice: int = 0) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "bench.noisy", "--role", *args]
    if nice:
        cmd = ["nice", "-n", str(nice), *cmd]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)


def measure(port: int, creds: list[tuple[str, str]], args: argparse.Namespace) -> tuple:
    seconds = str(args.seconds)
    quiet = child("victim", str(port), *creds[0], seconds, nice=-10)
    alone = json.loads(quiet.communicate()[0])
    noise = child(
        "neighbour",
        *(str(port), *creds[1], str(args.seconds + 3), str(args.flooders)),
        nice=args.neighbour_nice,
    )
    time.sleep(2)  # the neighbour's connections are up and flooding
    loud = child("victim", str(port), *creds[0], seconds, nice=-10)
    during = json.loads(loud.communicate()[0])
    flood = json.loads(noise.communicate()[0])
    return alone, during, flood


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--role"]:
        role(argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, nargs="?", help="an older checkout: A-B-B-A")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--flooders", type=int, default=50)
    parser.add_argument(
        "--neighbour-nice",
        type=int,
        default=0,
        help="the neighbour's generator at this niceness (10: the broker gets the CPU first, as "
        "it would with the neighbour's devices on other machines)",
    )
    args = parser.parse_args(argv)
    order = [("B", REPO)]
    if args.base is not None:
        base = args.base.resolve()
        order = [("A", base), ("B", REPO), ("B", REPO), ("A", base)]
    slugs, creds = archive.seed(2)
    print(f"load average at start {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)", flush=True)
    try:
        for label, repo in order:
            with_recorder(repo)
            stores = archive.Stores("file")
            broker = start_runbroker(repo, stores.new())
            try:
                time.sleep(1)
                alone, during, flood = measure(broker.port, creds, args)
            finally:
                broker.stop()
                stores.close()
            print(
                f"{label} {repo}: victim alone {alone} | beside the neighbour {during}"
                f" | the neighbour {flood}",
                flush=True,
            )
    finally:
        archive.cleanup(slugs)


if __name__ == "__main__":
    main()
