"""The same billing and backfill figures on `local[2]` and on `local-cluster[2,1,1024]`
(executors in two JVMs of their own, each with its own Python workers, as on a cluster), with
DuckDB beside, the masters alternated A-B-B-A (issue 42's benchmarks).

    .venv/bin/python -m bench.spark_masters [--tenants 100 --days 30] [--messages 1000000] \\
        [--runs 3] [--ways local[2],local-cluster[2,1,1024]] [--write]

The data are written once under `--dir` (and reused when they match): billing's usage log
(`bench.billing.generate`) and the backfill's compacted history (`bench.rules_backfill.generate`).
Then, per workload, the masters alternate A-B-B-A, each in a fresh process (one SparkContext a
process) that runs the workload `--runs` times in one session, as a worker keeps its session
(run 1: a fresh JVM's, the JIT and first jobs included; the later ones a warm worker's), then
DuckDB's equivalent `--runs` times in the same process: each Spark figure is divided by DuckDB's
best of the same process, minutes apart, so the machine's load weighs on both. Each process
also checks that Spark and DuckDB agree (the billing sums of every tenant, the backfill's result
count).

`local-cluster` needs a SPARK_HOME: its worker writes the executors' logs under
`$SPARK_HOME/work`, so each process gets a folder of links to the pyspark wheel's entries (as
`tests/spark/test_local_cluster.py` does), never the virtualenv's own. The executors' Python is
the venv's (`spark.session.build_session` sets `PYSPARK_PYTHON` for local masters).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MASTERS = ("local[2]", "local-cluster[2,1,1024]")
START_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)


def spark_home(folder: Path) -> Path:
    """A SPARK_HOME whose entries are the pyspark wheel's (links), so that local-cluster's
    worker writes under `folder/work`, not inside the virtualenv."""
    import pyspark

    wheel = Path(pyspark.__file__).parent
    folder.mkdir(parents=True, exist_ok=True)
    for entry in wheel.iterdir():
        if entry.name != "work" and not (folder / entry.name).exists():
            (folder / entry.name).symlink_to(entry)
    return folder


def history(root: Path, messages: int) -> tuple[int, int, list[str]]:
    """The backfill's history under `root` (generated and compacted once): (start, end, the
    bench tenant's files)."""
    from bench.rules_backfill import HOUR_MS, PER_HOUR, generate
    from common.stores.object_store import LocalObjectStore

    marker = root / "GENERATED.json"
    store = LocalObjectStore(root)
    if not (marker.exists() and json.loads(marker.read_text()) == {"messages": messages}):
        store.clear()
        started = time.monotonic()
        generate(store, messages, START_MS)
        print(f"history: {messages:,} messages in {time.monotonic() - started:.0f} s", flush=True)
        marker.write_text(json.dumps({"messages": messages}))
    end = START_MS + -(-messages // PER_HOUR) * HOUR_MS
    files = sorted(str(p) for p in (root / "archive" / "tenant=bench").rglob("*.parquet"))
    return START_MS, end, files


def child_billing(args: argparse.Namespace) -> dict[str, Any]:
    from bench import billing

    root = Path(args.dir) / "usage"
    period = billing.START.strftime("%Y-%m")
    spark = billing.run_spark(root, args.tenants, period, args.master, args.runs)
    duck = [billing.run_duckdb(root, period) for _ in range(args.runs)]
    same = len(duck[-1]["sums"]) == len(spark["sums"]) and all(
        spark["sums"][t] == {k: duck[-1]["sums"][t][k] for k in spark["sums"][t]}
        for t in duck[-1]["sums"]
    )
    return {
        "master": spark["master"],
        "session": spark["session_s"],
        "spark": spark["runs_s"],
        "duckdb": [d["seconds"] for d in duck],
        "rows": spark["rows"],
        "agree": same,
    }


def child_backfill(args: argparse.Namespace) -> dict[str, Any]:
    from bench import rules_backfill
    from common.stores.object_store import LocalObjectStore

    root = Path(args.dir) / "history"
    start, end, files = history(root, args.messages)
    started = time.monotonic()
    summaries = rules_backfill.run_spark(LocalObjectStore(root), start, end, args.runs, args.master)
    whole = time.monotonic() - started
    duck = [rules_backfill.run_duckdb(files, os.cpu_count() or 1) for _ in range(args.runs)]
    return {
        # (the backfill builds its own session: its start is the whole less the runs)
        "master": args.master,
        "session": whole - sum(s["seconds"] for s in summaries),
        "spark": [s["seconds"] for s in summaries],
        "duckdb": [seconds for _, seconds in duck],
        "rows": summaries[-1]["rows_read"],
        "agree": all(count == summaries[-1]["passed"] for count, _ in duck),
    }


def run_child(workload: str, way: str, args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(args.dir).resolve()
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        SPARK_HOME=str(spark_home(folder / "spark-home")),
        PYSPARK_PYTHON=sys.executable,
    )
    argv = [sys.executable, "-m", "bench.spark_masters", "--child", workload, "--master", way]
    argv += ["--dir", str(folder), "--runs", str(args.runs)]
    argv += ["--tenants", str(args.tenants), "--days", str(args.days)]
    argv += ["--messages", str(args.messages)]
    load = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{workload} on {way} failed: {done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(lines[-1][7:])
    figures.update(process=time.monotonic() - started, load=load, at=f"{datetime.now(UTC):%H:%M}")
    return figures


def ratios(figures: dict[str, Any]) -> tuple[float, float]:
    """(first run ÷ DuckDB's best, best later run ÷ DuckDB's best) of one process."""
    duck = min(figures["duckdb"])
    warm = min(figures["spark"][1:] or figures["spark"])
    return figures["spark"][0] / duck, warm / duck


def table(workload: str, rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [
        f"| {workload}: way | time (UTC) | load at start | session | Spark runs (s) | DuckDB "
        "best (s) | first ÷ DuckDB | warm ÷ DuckDB | agree |",
        "|---|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for master, f in rows:
        first, warm = ratios(f)
        runs = ", ".join(f"{s:.2f}" for s in f["spark"])
        lines.append(
            f"| {master} | {f['at']} | {f['load']:.1f} | {f['session']:.1f} s | {runs} | "
            f"{min(f['duckdb']):.2f} | {first:.1f}× | {warm:.1f}× | {f['agree']} |"
        )
    return lines


def summary(workload: str, ways: list[str], rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Per way, the medians over its processes, and its warm run over the first way's."""
    lines = [
        f"| {workload}: way | first run ÷ DuckDB | warm ÷ DuckDB | warm run ÷ {ways[0]}'s |",
        "|---|---:|---:|---:|",
    ]
    base = None
    for way in ways:
        mine = [f for m, f in rows if m == way]
        first = statistics.median(ratios(f)[0] for f in mine)
        warm = statistics.median(ratios(f)[1] for f in mine)
        seconds = statistics.median(min(f["spark"][1:] or f["spark"]) for f in mine)
        base = base or seconds
        lines.append(f"| {way} | {first:.1f}× | {warm:.1f}× | {seconds / base:.2f}× |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3, help="in one session (and DuckDB's)")
    parser.add_argument("--workloads", default="billing,backfill")
    parser.add_argument(
        "--ways",
        default=",".join(MASTERS),
        help="masters, alternated A-B-…-B-A",
    )
    parser.add_argument("--dir", default="/tmp/bench-spark-masters")
    parser.add_argument("--write", action="store_true", help="append to bench/RESULTS.md")
    parser.add_argument("--child", choices=["billing", "backfill"], help=argparse.SUPPRESS)
    parser.add_argument("--master", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run = child_billing if args.child == "billing" else child_backfill
        print("RESULT " + json.dumps(run(args)), flush=True)
        return

    from bench import billing

    folder = Path(args.dir)
    started = time.monotonic()
    rows = billing.generate(folder / "usage", args.tenants, args.days)
    print(f"usage log: {rows:,} rows ({time.monotonic() - started:.0f} s)", flush=True)
    history(folder / "history", args.messages)
    ways = re.split(r",(?![^\[]*\])", args.ways)  # (not the commas inside a master's [])
    order = ways + ways[::-1]  # A-B-B-A (A-B-C-C-B-A)
    out: list[str] = []
    for workload in args.workloads.split(","):
        results = []
        for way in order:
            figures = run_child(workload, way, args)
            print(f"{workload} {way}: {json.dumps(figures)}", flush=True)
            results.append((way, figures))
        out += ["", *table(workload, results), "", *summary(workload, ways, results)]
    print("\n".join(out))
    if args.write:
        with (REPO / "bench" / "RESULTS.md").open("a") as results_md:
            results_md.write(
                "\n## Billing and backfill on local-cluster beside local mode and DuckDB "
                "(issue 42)\n\n"
                f"Command: `.venv/bin/python -m bench.spark_masters --tenants {args.tenants} "
                f"--days {args.days} --messages {args.messages} --runs {args.runs} "
                f"--ways {args.ways} --write`  \n"
                f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {platform.node()}, "
                f"{os.cpu_count()} cores, Python {platform.python_version()}.\n"
                + "\n".join(out)
                + "\n"
            )


if __name__ == "__main__":
    main()
