"""What the broker's sample of its sessions' figures costs (issue 30: `GET /api/v1/sessions`'s
queue depth and in flight, `data_plane.tenancy.session_figures`), without a database: the CPU of
one sample over N live sessions, and the longest the event loop waits for it.

    .venv/bin/python -m bench.session_figures [--sessions 100000] [--changed 0.1] [--runs 10]

Each run samples N sessions of which a fraction `--changed` moved since the last sample (the
rest cost only the comparison). A ticker task on the same loop records the longest gap between
its turns while a sample runs: what a client's packet could wait. Reported: the median and
worst CPU time of a sample and the longest loop turn seen, in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import OrderedDict, deque
from types import SimpleNamespace

from data_plane.tenancy.session_figures import SessionFigures


async def _run(sessions: int, changed: float, runs: int) -> dict:
    table = {
        f"{i:032x}": SimpleNamespace(queue=deque(), inflight=OrderedDict()) for i in range(sessions)
    }
    figures = SessionFigures()
    moving = list(table.values())[: int(sessions * changed)]
    cpu: list[float] = []
    gaps: list[float] = []
    running = True

    async def ticker() -> None:
        last = time.perf_counter()
        while running:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    for run in range(runs):
        for session in moving:  # these moved since the last sample
            session.queue.append(run) if run % 2 else session.queue.clear()
        gaps.clear()
        started = time.process_time()
        rows = await figures.sample(list(table), table)
        figures.written(rows)
        cpu.append(time.process_time() - started)
    running = False
    await tick
    return {
        "sessions": sessions,
        "changed": len(moving),
        "cpu_ms_median": round(1000 * statistics.median(cpu), 1),
        "cpu_ms_worst": round(1000 * max(cpu), 1),
        "longest_loop_turn_ms": round(1000 * max(gaps), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--changed", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    print(asyncio.run(_run(args.sessions, args.changed, args.runs)))


if __name__ == "__main__":
    main()
