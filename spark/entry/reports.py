"""Where a submitted job and the platform meet: the job writes `progress.json` as it goes and
`result.json` when it ends under a folder of the object store the platform chose (`--report`);
the platform reads them while the cluster says the job runs, and once it ended. The platform
writes `job-run.json` there when it submitted (which job run it is: what the stale-run cleanup
cancels when the worker that followed it was lost).

`result.json`: `{"state": "done"|"failed"|"cancelled", "summary": {…}, "error": words,
"master": the Spark master it ran on}`; the error is meant for the tenant (no address, no
trace: those are in the job's log).

A folder lives as long as its job: whoever followed the job removes it once the job ended and its
figures were read (`remove`); what a lost follower left is swept by the stale-run cleanup
(`sweep`, from `tenants.rules.runs.services.runs_reclaim`). Billing's folder holds the accounts
(every tenant's price book): nothing of it is kept once the invoices are back.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from common.stores.object_store import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)
KINDS = ("rules", "billing")
# A folder's key ends with the second it was submitted (backfill-20261001T020000-1a2b3c4d,
# 2026-09-20261001T020000-1a2b3c4d); a tenant's run's is `run-{RuleRun id}`.
STAMPED = re.compile(r"-(\d{8}T\d{6})-[0-9a-f]{8}$")
RUN = "run-"

PROGRESS = "progress.json"
RESULT = "result.json"
JOB_RUN = "job-run.json"  # written by the platform when it submitted: which job run it is


def report_folder(kind: str, key: str) -> str:
    """`rules/jobs/{key}` for a rules job, `billing/jobs/{key}` for billing: prefixes the job
    role may write (the Terraform's `write_prefixes`)."""
    return f"{kind}/jobs/{key}"


def stamped(prefix: str, now: datetime | None = None) -> str:
    """The key of a job no RuleRun names (a backfill, billing): `{prefix}-{second}-{8 hex}`, the
    second it is submitted (what `sweep` ages its folder by; unique, so a client token too)."""
    return f"{prefix}-{now or datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def rule_run_folder(run_id: object) -> str:
    """The folder of a tenant's RuleRun on the cluster."""
    return report_folder("rules", f"run-{run_id}")


def write(store: ObjectStore, folder: str, name: str, body: dict[str, Any]) -> None:
    store.put(f"{folder}/{name}", json.dumps(body, sort_keys=True, default=str).encode())


def read(store: ObjectStore, folder: str, name: str) -> dict[str, Any] | None:
    """The JSON the job wrote, or None when it wrote none (yet)."""
    try:
        body: dict[str, Any] = json.loads(store.get(f"{folder}/{name}"))
    except ObjectNotFound:
        return None
    return body


def remove(store: ObjectStore, folder: str) -> int:
    """Delete what the folder holds (the job ended, its figures were read); how many objects.
    Never raises: a folder left behind is `sweep`'s."""
    removed = 0
    try:
        for key in store.list(f"{folder}/"):
            store.delete(key)
            removed += 1
    except Exception:
        log.warning(
            "job reports %s: not removed (the stale-run cleanup will)", folder, exc_info=True
        )
    return removed


def sweep(
    store: ObjectStore, *, active_runs: Collection[str], keep: timedelta, now: datetime
) -> list[str]:
    """Remove the report folders no one follows any more; the folders removed. A tenant's run's
    (`run-{id}`) once the run is not under way (`active_runs`: the ids of queued and running
    runs; its follower reads the result before the run ends); a backfill's or billing's, whose
    follower is a process that may be gone, once submitted more than `keep` ago (longer than a
    job may run). A folder named otherwise is left alone."""
    gone = []
    for kind in KINDS:
        folders: dict[str, list[str]] = {}
        for key in store.list(f"{kind}/jobs/"):
            name = key.split("/")[2] if key.count("/") >= 3 else ""
            if name:
                folders.setdefault(name, []).append(key)
        for name, keys in sorted(folders.items()):
            if name.startswith(RUN):
                ended = name.removeprefix(RUN) not in active_runs
            else:
                stamp = STAMPED.search(name)
                submitted = (
                    datetime.strptime(stamp.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
                    if stamp
                    else None
                )
                ended = submitted is not None and submitted < now - keep
            if ended:
                for key in keys:
                    store.delete(key)
                gone.append(report_folder(kind, name))
    return gone
