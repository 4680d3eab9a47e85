"""The report folders of jobs on the cluster (`spark.entry.reports`) live as long as their job:
removed by whoever followed the job once it ended (`remove`), swept by the stale-run cleanup when
that follower was lost (`sweep`). The followers' own removal and the cleanup's are run end to end
against moto in tests/spark/test_emr_serverless.py."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from common.stores.object_store import LocalObjectStore
from spark.entry import reports

NOW = datetime(2026, 10, 3, 12, 0, tzinfo=UTC)
KEEP = timedelta(hours=48)


def _folder(store, folder: str, *names: str) -> None:
    for name in names or (reports.PROGRESS, reports.RESULT):
        store.put(f"{folder}/{name}", b"{}")


def _stamp(moment: datetime) -> str:
    return reports.stamped("x", moment).removeprefix("x-")


def test_remove_takes_the_folder_and_nothing_beside_it(tmp_path):
    store = LocalObjectStore(tmp_path)
    _folder(store, "rules/jobs/run-7", reports.JOB_RUN, reports.PROGRESS, reports.RESULT)
    _folder(store, "rules/jobs/run-77")  # its name starts with the other's
    assert reports.remove(store, "rules/jobs/run-7") == 3
    assert store.list("rules/jobs/") == [
        "rules/jobs/run-77/progress.json",
        "rules/jobs/run-77/result.json",
    ]
    assert reports.remove(store, "rules/jobs/run-7") == 0  # twice: nothing more to do


def test_remove_never_raises(tmp_path, caplog):
    class Broken(LocalObjectStore):
        def list(self, prefix: str = "") -> list[str]:
            raise OSError("the store is away")

    with caplog.at_level(logging.WARNING, logger="spark.entry.reports"):
        assert reports.remove(Broken(tmp_path), "billing/jobs/x") == 0
    assert "stale-run cleanup" in caplog.text


def test_sweep_takes_what_no_one_follows_any_more(tmp_path):
    store = LocalObjectStore(tmp_path)
    old, recent = _stamp(NOW - KEEP - timedelta(minutes=1)), _stamp(NOW - KEEP + timedelta(hours=1))
    _folder(store, "rules/jobs/run-under-way", reports.JOB_RUN)
    _folder(store, "rules/jobs/run-ended", reports.JOB_RUN, reports.RESULT)
    _folder(store, f"rules/jobs/backfill-{old}")
    _folder(store, f"rules/jobs/backfill-{recent}")
    _folder(store, f"billing/jobs/2026-09-{old}", "accounts.json", reports.RESULT)
    _folder(store, f"billing/jobs/2026-09-{recent}", "accounts.json")
    _folder(store, "rules/jobs/by-hand")  # an operator's own name (the spark module's README)
    store.put("rules/outputs/x.json", b"{}")  # not a job's report

    gone = reports.sweep(store, active_runs={"under-way"}, keep=KEEP, now=NOW)

    assert sorted(gone) == sorted(
        [
            f"billing/jobs/2026-09-{old}",
            f"rules/jobs/backfill-{old}",
            "rules/jobs/run-ended",
        ]
    )
    left = {key.rpartition("/")[0] for key in store.list("")}
    assert left == {
        "rules/jobs/run-under-way",
        f"rules/jobs/backfill-{recent}",
        f"billing/jobs/2026-09-{recent}",
        "rules/jobs/by-hand",
        "rules/outputs",
    }
    assert reports.sweep(store, active_runs={"under-way"}, keep=KEEP, now=NOW) == []


def test_the_stamp_of_a_key_is_what_the_sweep_ages_it_by(tmp_path):
    """Billing's and a backfill's folders are named by `stamped` (tenants/billing/cluster.py,
    tenants/management/commands/run_rules.py)."""
    store = LocalObjectStore(tmp_path)
    old = reports.stamped("2026-09", NOW - KEEP - timedelta(seconds=1))
    recent = reports.stamped("backfill", NOW - KEEP + timedelta(seconds=1))
    assert old != reports.stamped("2026-09", NOW - KEEP - timedelta(seconds=1))  # unique
    _folder(store, reports.report_folder("billing", old))
    _folder(store, reports.report_folder("rules", recent))
    gone = reports.sweep(store, active_runs=(), keep=KEEP, now=NOW)
    assert gone == [reports.report_folder("billing", old)]
