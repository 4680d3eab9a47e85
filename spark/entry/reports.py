"""Where a submitted job and the platform meet: the job writes `progress.json` as it goes and
`result.json` when it ends under a folder of the object store the platform chose (`--report`);
the platform reads them while the cluster says the job runs, and once it ended.

`result.json`: `{"state": "done"|"failed"|"cancelled", "summary": {…}, "error": words}`; the
error is meant for the tenant (no address, no trace: those are in the job's log)."""

from __future__ import annotations

import json
from typing import Any

from common.stores.object_store import ObjectNotFound, ObjectStore

PROGRESS = "progress.json"
RESULT = "result.json"


def report_folder(kind: str, key: str) -> str:
    """`rules/jobs/{key}` for a rules job, `billing/jobs/{key}` for billing: prefixes the job
    role may write (the Terraform's `write_prefixes`)."""
    return f"{kind}/jobs/{key}"


def write(store: ObjectStore, folder: str, name: str, body: dict[str, Any]) -> None:
    store.put(f"{folder}/{name}", json.dumps(body, sort_keys=True, default=str).encode())


def read(store: ObjectStore, folder: str, name: str) -> dict[str, Any] | None:
    """The JSON the job wrote, or None when it wrote none (yet)."""
    try:
        body: dict[str, Any] = json.loads(store.get(f"{folder}/{name}"))
    except ObjectNotFound:
        return None
    return body
