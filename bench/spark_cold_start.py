"""A one-off Spark job's fixed cost (issue 42, point 5): from starting the process to the
session ready and its first job done, each run in a fresh process, beside DuckDB's.

    .venv/bin/python -m bench.spark_cold_start [--runs 3] [--write]

Three ways a job starts here: `python` building the session the platform's jobs build
(`spark.session.build_session`, `local[2]`: a Celery worker's run over history, `billing_report`),
the same under the venv's `spark-submit` (how EMR Serverless and the tests run the entry points),
and `local-cluster[2,1,1024]` (executors in two more JVMs). Each process prints, as JSON, the
seconds from its own start to the session built and to a first job (`range(1000).count()`) done;
the wall time around the process is measured here too (the JVM's exit included). DuckDB's
`import duckdb; SELECT 1` in a fresh process is the comparison. Runs alternate (A-B-C-D, then
D-C-B-A), the machine named with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 15.0

JOB = """
import json, sys, time
started = time.time()
from spark.session import build_session
spark = build_session("cold-start", sys.argv[1] if len(sys.argv) > 1 else None)
ready = time.time()
spark.range(1000).count()
done = time.time()
print("COLD " + json.dumps({"session": ready - started, "first_job": done - started}), flush=True)
spark.stop()
"""

DUCKDB = """
import json, time
started = time.time()
import duckdb
duckdb.sql("SELECT 1").fetchall()
print("COLD " + json.dumps({"session": time.time() - started, "first_job": time.time() - started}))
"""


def _run(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    wall = time.monotonic() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("COLD ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{argv[:3]} failed: {done.stderr[-2000:]}")
    figures = json.loads(lines[-1][5:])
    figures["wall"] = wall
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds (each: every way, twice)")
    parser.add_argument("--write", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args(argv)
    from bench.spark_masters import spark_home

    folder = Path(tempfile.mkdtemp(prefix="bench-cold-start-"))
    # spark-submit finds its Spark and Python from these (the venv's, as the tests run it); the
    # SPARK_HOME is links to the wheel's, since local-cluster's worker writes the executors'
    # logs under $SPARK_HOME/work (the wheel's own would be inside the shared virtualenv).
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        SPARK_HOME=str(spark_home(folder / "spark-home")),
        PYSPARK_PYTHON=sys.executable,
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    )
    script = folder / "job.py"
    script.write_text(JOB)
    submit = str(Path(sys.executable).parent / "spark-submit")
    ways = {
        "python, local[2]": [sys.executable, str(script), "local[2]"],
        "spark-submit, local[2]": [submit, "--master", "local[2]", str(script), "local[2]"],
        "python, local-cluster[2,1,1024]": [sys.executable, str(script), "local-cluster[2,1,1024]"],
        "DuckDB": [sys.executable, "-c", DUCKDB],
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
    order = list(ways)
    for round_ in range(args.runs):
        for name in order if round_ % 2 == 0 else list(reversed(order)):
            figures = _run(ways[name], env)
            results[name].append(figures)
            print(f"{name}: {figures}", flush=True)
    rows = []
    for name, runs in results.items():
        session = statistics.median(r["session"] for r in runs)
        first = statistics.median(r["first_job"] for r in runs)
        wall = statistics.median(r["wall"] for r in runs)
        rows.append((name, session, first, wall, max(r["first_job"] for r in runs)))
        print(f"{name}: session {session:.2f} s, first job {first:.2f} s, process {wall:.2f} s")
    duck = next(r for r in rows if r[0] == "DuckDB")[2]
    if args.write:
        with (REPO / "bench" / "RESULTS.md").open("a") as out:
            out.write(
                "\n## A one-off Spark job's start (issue 42, point 5)\n\n"
                f"Command: `.venv/bin/python -m bench.spark_cold_start --runs {args.runs} "
                "--write`  \n"
                f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {platform.node()}, "
                f"{os.cpu_count()} cores, Python {platform.python_version()}; each figure the "
                f"median of {args.runs} fresh processes per way, ways alternated.\n\n"
                "| how the job starts | session ready (s) | first job done (s) | process, exit "
                f"included (s) | worst first job (s) | first job ÷ DuckDB's |\n"
                "|---|---:|---:|---:|---:|---:|\n"
            )
            for name, session, first, wall, worst in rows:
                out.write(
                    f"| {name} | {session:.2f} | {first:.2f} | {wall:.2f} | {worst:.2f} | "
                    f"{first / duck:.0f}× |\n"
                )
            out.write(
                f"\nThe target: a one-off job's start ≤ {TARGET_SECONDS:.0f} s on this machine "
                "(the warm rates are the Spark targets; the start is a fixed cost per job).\n"
            )


if __name__ == "__main__":
    main()
