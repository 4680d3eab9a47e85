"""What the platform adds before Spark starts, per job it submits to EMR Serverless (issue 42):
N submissions through the platform's own code against moto's EMR Serverless and S3 (moto's
server over HTTP on loopback, `bench.s3.moto_server`, as the tests run it), p50/p99 in ms.

    .venv/bin/python -m bench.emr_submit [--submissions 200] [--accounts 100] [--write]

Two kinds of submission, alternated:

- **billing**: `tenants.billing.cluster.billing_on_cluster` as `billing_report` calls it: the
  accounts' JSON put in the store (`--accounts` of them, each with the bench's price book),
  `StartJobRun`, then the follower's first poll (`GetJobRun`, the job's progress.json and
  result.json read), and the folder's removal once the job ended. moto runs no job: its job run
  is SUCCESS at once, so the first poll is the last and the call ends in `BillingJobFailed` (no
  result: nothing ran), which is caught.
- **rule run**: what `tenants.rules.runs.cluster.execute_on_cluster` does around the cluster,
  less its Postgres writes (the run's state, heartbeats: not measured here): the arguments
  (`backfill_arguments`), `StartJobRun` with the run's id as client token, the job run's id
  recorded (`job-run.json`), the first poll (`wait_for_job`), the folder's removal.

Each stage is timed by wrapping the runner and the store the platform's code is given (the
calls are the real ones). Once per process, apart: the runner's boto3 client (`cluster_runner`'s
first use) and the first submission on it (connections opened). Once per release, apart:
`python -m spark.package upload` (build and put). moto answers in the same machine, so the
figures are the platform's work plus moto's serving; against AWS each request adds a round trip
to the region and EMR's own API time, which no bench here can measure.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BUCKET = "bench-spark"


class Clock:
    """Each submission's time (ms) per stage, summed over the calls of a stage (a folder's
    removal is a LIST and a DELETE per object; the poll a GetJobRun and two GETs)."""

    def __init__(self) -> None:
        self.submissions: list[dict[str, float]] = []
        self.stage = "other"

    def begin(self) -> None:
        self.submissions.append(defaultdict(float))
        self.stage = "other"

    def timed(self, stage: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            self.submissions[-1][stage] += (time.perf_counter() - started) * 1000

    def stages(self) -> dict[str, list[float]]:
        names = dict.fromkeys(name for one in self.submissions for name in one)
        return {name: [one.get(name, 0.0) for one in self.submissions] for name in names}


class TimedRunner:
    """The platform's runner, each call timed: StartJobRun, GetJobRun (the poll)."""

    def __init__(self, runner: Any, clock: Clock) -> None:
        self.runner, self.clock = runner, clock

    def submit(self, *args: Any, **kwargs: Any) -> str:
        job: str = self.clock.timed("StartJobRun", self.runner.submit, *args, **kwargs)
        self.clock.stage = "poll: reports read"  # what the store does next is the poll's
        return job

    def state(self, job: str) -> Any:
        return self.clock.timed("poll: GetJobRun", self.runner.state, job)

    def cancel(self, job: str) -> None:
        self.runner.cancel(job)


class TimedStore:
    """The object store, each call timed under the stage the submission is in."""

    def __init__(self, store: Any, clock: Clock) -> None:
        self.store, self.clock = store, clock
        self.url = store.url

    def put(self, key: str, data: bytes) -> None:
        stage = "accounts put" if key.endswith("accounts.json") else "job-run.json put"
        self.clock.timed(stage, self.store.put, key, data)

    def get(self, key: str) -> bytes:
        body: bytes = self.clock.timed(self.clock.stage, self.store.get, key)
        return body

    def list(self, prefix: str = "") -> list[str]:
        keys: list[str] = self.clock.timed("folder removed", self.store.list, prefix)
        return keys

    def delete(self, key: str) -> None:
        self.clock.timed("folder removed", self.store.delete, key)


def billing_once(runner: Any, store: Any, accounts: list[Any], clock: Clock) -> float:
    from tenants.billing.cluster import BillingJobFailed, billing_on_cluster

    clock.begin()
    started = time.perf_counter()
    try:
        billing_on_cluster(
            "2026-09", accounts, runner=TimedRunner(runner, clock), store=TimedStore(store, clock)
        )
    except BillingJobFailed:
        pass  # moto ran nothing: no result (the follow ended as it would)
    return (time.perf_counter() - started) * 1000


def rule_run_once(runner: Any, store: Any, number: int, clock: Clock) -> float:
    import uuid

    from spark.cluster.emr_serverless import wait_for_job
    from spark.entry import reports
    from tenants.rules.runs.cluster import ENTRY_POINT, backfill_arguments

    clock.begin()
    started = time.perf_counter()
    run_id = str(uuid.uuid4())
    report = reports.rule_run_folder(run_id)
    timed_runner, timed_store = TimedRunner(runner, clock), TimedStore(store, clock)
    arguments = clock.timed(
        "arguments",
        backfill_arguments,
        start_ms=1_767_225_600_000,
        end_ms=1_767_225_600_000 + 86_400_000 * 7,
        report=report,
        store_url=store.url,
        tenant=f"tenant-{number % 50}",
        rule="hot",
        actions="new-only",
        run_id=run_id,
    )
    job = timed_runner.submit(
        ENTRY_POINT, arguments, name=f"rule-run-{run_id}", client_token=run_id
    )
    reports.write(timed_store, report, reports.JOB_RUN, {"job_run_id": job})
    wait_for_job(timed_runner, job, timed_store, report, poll=0)
    reports.remove(timed_store, report)
    return (time.perf_counter() - started) * 1000


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """(p50, p99, max)."""
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return statistics.median(values), cuts[98], max(values)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--submissions", type=int, default=200, help="of each kind")
    parser.add_argument("--accounts", type=int, default=100, help="tenants billed per job")
    parser.add_argument("--uploads", type=int, default=3, help="package uploads timed")
    parser.add_argument("--write", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    import boto3
    import django

    django.setup()  # backfill_arguments reads the database's settings (no connection made)
    from bench.billing import PRICE_BOOK
    from bench.s3 import create_bucket, moto_server
    from common.stores.object_store import S3ObjectStore
    from spark import package
    from spark.billing.job import Account
    from spark.cluster.emr_serverless import EmrServerlessRunner, EmrSettings

    accounts = [Account(f"tenant-{i:04d}", PRICE_BOOK) for i in range(args.accounts)]
    with moto_server() as env:
        os.environ.update(env)
        create_bucket(env, BUCKET)
        uploads = []
        for _ in range(args.uploads):
            with tempfile.TemporaryDirectory() as out:
                started = time.perf_counter()
                code_uri = package.upload(BUCKET, "spark-code/", Path(out))
                uploads.append((time.perf_counter() - started) * 1000)
        emr = boto3.client("emr-serverless", endpoint_url=env["AWS_ENDPOINT_URL"])
        app = emr.create_application(name="bench", releaseLabel="emr-7.9.0", type="SPARK")
        settings = EmrSettings.from_env(
            {
                "SPARK_APPLICATION_ID": app["applicationId"],
                "SPARK_JOB_ROLE_ARN": "arn:aws:iam::123456789012:role/bench-spark-job",
                "SPARK_CODE_URI": code_uri,
                "SPARK_LOG_GROUP_NAME": "/bench/emr-serverless",
                "AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"],
            }
        )
        store = S3ObjectStore(BUCKET, "mqtt", endpoint_url=env["AWS_ENDPOINT_URL"])
        started = time.perf_counter()
        runner = EmrServerlessRunner(settings)
        client_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        runner.submit("billing", ["--period", "2026-09"], client_token="first")
        first_ms = (time.perf_counter() - started) * 1000

        clocks = {"billing": Clock(), "rule run": Clock()}
        totals: dict[str, list[float]] = {"billing": [], "rule run": []}
        load = os.getloadavg()[0]
        began = datetime.now(UTC)
        for number in range(args.submissions):
            # alternated, each kind first in turn (A-B, B-A, ...)
            kinds = ["billing", "rule run"] if number % 2 == 0 else ["rule run", "billing"]
            for kind in kinds:
                if kind == "billing":
                    totals[kind].append(billing_once(runner, store, accounts, clocks[kind]))
                else:
                    totals[kind].append(rule_run_once(runner, store, number, clocks[kind]))
        ended = datetime.now(UTC)

    lines = [
        "| submission | stage | submissions | p50 (ms) | p99 (ms) | max (ms) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for kind, clock in clocks.items():
        p50, p99, top = percentiles(totals[kind])
        lines.append(
            f"| **{kind}** | **whole (per submission)** | {len(totals[kind])} | **{p50:.1f}** | "
            f"**{p99:.1f}** | {top:.1f} |"
        )
        for stage, values in clock.stages().items():
            p50, p99, top = percentiles(values)
            lines.append(
                f"| {kind} | {stage} | {len(values)} | {p50:.1f} | {p99:.1f} | {top:.1f} |"
            )
    once = (
        f"Once per process: the runner's boto3 client {client_ms:.0f} ms, its first StartJobRun "
        f"{first_ms:.0f} ms. Once per release: `spark.package upload` (build + put) "
        f"{statistics.median(uploads):.0f} ms (median of {len(uploads)})."
    )
    print("\n".join(lines))
    print(once)
    if args.write:
        with (REPO / "bench" / "RESULTS.md").open("a") as out:
            out.write(
                "\n## A job's submission to EMR Serverless, through moto (issue 42)\n\n"
                f"Command: `.venv/bin/python -m bench.emr_submit --submissions "
                f"{args.submissions} --accounts {args.accounts} --write`  \n"
                f"Date: {began:%Y-%m-%d %H:%M}–{ended:%H:%M} UTC; {platform.node()}, "
                f"{os.cpu_count()} cores, Python {platform.python_version()}; load average "
                f"at start {load:.1f}.\n\n" + "\n".join(lines) + f"\n\n{once}\n"
            )


if __name__ == "__main__":
    main()
