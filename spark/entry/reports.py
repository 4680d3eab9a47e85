"""Where a submitted job and the platform meet: the job writes `progress.json` as it goes and
`result.json` when it ends under a folder of the object store the platform chose (`--report`);
the platform reads them while the cluster says the job runs, and once it ended. The platform
writes `job-run.json` there when it submitted (which job run it is: what the stale-run cleanup
cancels when the worker that followed it was lost).

`result.json`: `{"state": "done"|"failed"|"cancelled", "summary": {…}, "error": words}`; the
error is meant for the tenant (no address, no trace: those are in the job's log)."""

from __future__ import annotations

import json
from typing import Any

from common.stores.object_store import ObjectNotFound, ObjectStore

PROGRESS = "progress.json"
RESULT = "result.json"
JOB_RUN = "job-run.json"  # written by the platform when it submitted: which job run it is


def report_folder(kind: str, key: str) -> str:
    """`rules/jobs/{key}` for a rules job, `billing/jobs/{key}` for billing: prefixes the job
    role may write (the Terraform's `write_prefixes`)."""
    return f"{kind}/jobs/{key}"


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
