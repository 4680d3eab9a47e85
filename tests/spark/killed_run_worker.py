"""A run's worker to be killed (`python -m tests.spark.killed_run_worker`, a JSON job on stdin):
what `tenants.rules.runs.execute` does for one chunk of a `new-only` run — the run marked
running, its actions through the backfill's own firing path (`spark.rules.runner.process`, the
ledger gate bound to the run, the real action pool) — without Spark, whose JVM start costs
~20 s; the passed rows (rule id, ts, outputs JSON, message id) come from the test. It prints
`ready` before firing; the test kills it with SIGKILL while the receiver holds the calls, as
the kernel kills a worker out of memory: no `finally`, no settle, no heartbeat after."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from common.stores.object_store import LocalObjectStore
from spark.rules import firing
from spark.rules import store as db
from spark.rules.actions import ActionRunner
from spark.rules.metering import UsageWriter
from spark.rules.runner import process


def main() -> None:
    job = json.loads(sys.stdin.read())
    dsn = job["dsn"]
    with db.connect(dsn) as conn:
        conn.execute(
            "UPDATE tenants_rulerun SET state = 'running', started_at = now(), "
            "heartbeat_at = now() WHERE id = %s AND state = 'queued'",
            (job["run"],),
        )
        specs = {s.id: s for s in db.load_rules(conn, tenant=job["tenant"], rule=job["rule"])}
    store = LocalObjectStore(Path(job["store"]))
    runner = ActionRunner(store, service_key=b"k" * 32, attempts=1, timeout=60)
    gate = firing.Gate(firing.NEW_ONLY, lambda: db.connect(dsn), job["run"])
    rows = [tuple(r) for r in job["rows"]]
    print("ready", flush=True)
    process(specs, [], rows, runner, UsageWriter(store, "rules-backfill").new_tally(), gate)
    print("settled", flush=True)  # never reached: killed while the receiver holds the calls


if __name__ == "__main__":
    main()
