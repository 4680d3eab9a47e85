"""Two builds of our broker, A-B-B-A in one run: pairs (or fan-in) at QoS 0 and QoS 1, delivered
msg/s and CPU per message.

    .venv/bin/python -m bench.ab_builds /path/to/other/checkout [--seconds 8] [--scenario fanin]

A is the other checkout (e.g. `git worktree add /tmp/base <commit>`), B this one; each runs as
`python -m data_plane` from its own directory (its own `data_plane/` and `common/` come first on
`sys.path`), with this virtualenv. The order A, B, B, A cancels a drift in machine load; the
figures per build are the means of its two runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from bench import brokers, scenarios


async def run(repo: Path, scenario: str, qos: int, seconds: float) -> scenarios.Result:
    broker = brokers.start("ours", repo=repo)
    try:
        await asyncio.sleep(0.3)
        if scenario == "fanin":  # 100 publishers into one subscriber
            return await scenarios.fanin(broker, n=100, qos=qos, seconds=seconds)
        return await scenarios.pairs(broker, n=100, qos=qos, seconds=seconds)
    finally:
        broker.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("base", type=Path, help="checkout A (B is this one)")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--scenario", choices=("pairs", "fanin"), default="pairs")
    args = parser.parse_args()
    builds = {"A": args.base.resolve(), "B": brokers.REPO}
    print(f"A = {builds['A']}\nB = {builds['B']}\nload average at start {os.getloadavg()[0]:.1f}")
    for qos in (0, 1):
        runs: dict[str, list[scenarios.Result]] = {"A": [], "B": []}
        for label in ("A", "B", "B", "A"):
            result = await run(builds[label], args.scenario, qos, args.seconds)
            runs[label].append(result)
            print(
                f"  qos={qos} {label} {result.delivered_per_s:>10,.0f} msg/s "
                f"cpu/1k {result.cpu_per_1000:.5f} loss {result.loss} {result.note}"
            )
        mean = {k: sum(r.cpu_per_1000 for r in v) / len(v) for k, v in runs.items()}
        rate = {k: sum(r.delivered_per_s for r in v) / len(v) for k, v in runs.items()}
        lost = {k: sum(r.loss for r in v) for k, v in runs.items()}
        print(
            f"{args.scenario} n=100 qos={qos} 1 KiB | A {rate['A']:,.0f} msg/s cpu/1k {mean['A']:.5f} | "
            f"B {rate['B']:,.0f} msg/s cpu/1k {mean['B']:.5f} | lost A {lost['A']:,} B {lost['B']:,} | "
            f"B/A CPU per message {mean['B'] / mean['A']:.3f}"
        )
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
