"""The billing job on the Spark cluster (`SPARK_RUNNER=emr-serverless`): what
`services.run_billing_job` does instead of starting Spark in this process.

The accounts (price books, issued months, credits: the database's) go to the object store as
JSON; the entry point `spark/entry/billing.py` is submitted with the period, that key and where
to report; its progress steps are passed on as they come; its result (the invoice documents) is
the `BillingResult` the caller stores, exactly as a local run's. A job run that does not end
`done` raises `BillingJobFailed`, naming the job run and why (operators read it: billing is
theirs). Either way, once the job ended its folder (the accounts, the reports) is removed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ENTRY_POINT = "billing"


class BillingJobFailed(Exception):
    """The billing job run on the cluster did not end done."""


def billing_on_cluster(
    period: str,
    accounts: list[Any],
    progress: Callable[[str], None] = lambda step: None,
    *,
    runner: Any = None,
    store: Any = None,
    poll: float | None = None,
) -> Any:
    from common.stores.object_store import open_object_store
    from spark.billing.job import BillingResult
    from spark.cluster.emr_serverless import cluster_runner, wait_for_job
    from spark.entry import reports
    from spark.entry.billing import accounts_json

    store = store or open_object_store()
    key = reports.stamped(period)
    folder = reports.report_folder("billing", key)
    accounts_key = f"{folder}/accounts.json"
    store.put(accounts_key, accounts_json(accounts))
    runner = runner or cluster_runner()
    job = runner.submit(
        ENTRY_POINT,
        [
            "--period",
            period,
            "--accounts",
            accounts_key,
            "--object-store-url",
            store.url,
            "--report",
            folder,
        ],
        name=f"billing-{period}",
        client_token=key,
    )
    shown: set[str] = set()

    def steps(figures: dict[str, Any]) -> None:
        for step in figures.get("steps", []):
            if step not in shown:
                shown.add(step)
                progress(step)

    state, result = wait_for_job(runner, job, store, folder, progress=steps, poll=poll)
    # The job ended and its result is read: the folder (every tenant's price book among the
    # accounts) is not kept. (A follower lost before this leaves it to the stale-run sweep.)
    reports.remove(store, folder)
    if state.state == "done" and result is not None and result.get("state") == "done":
        return BillingResult(**result["result"])
    why = (result or {}).get("error") or state.details or state.emr_state
    raise BillingJobFailed(f"the billing job run {job} ended {state.emr_state}: {why}")
