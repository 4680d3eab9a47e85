"""A RuleRun's figures from what a backfill reports: its summary when it ends, its progress as
it goes (local runs, `execute.py`, and runs on the cluster, `cluster.py`)."""

from __future__ import annotations


def ended_fields(summary: dict) -> dict:
    """The RuleRun's figures from a backfill's summary (`run_backfill`'s, local or the cluster
    job's result)."""
    fields = {
        "read": summary["rows_read"],
        "considered": summary["matched"],
        "matched": summary["passed"],
        "failed": summary["failed"],
        "actions_fired": summary["actions_ok"] + summary["actions_failed"],
        "actions_failed": summary["actions_failed"],
        "actions_skipped": summary["actions_skipped"],
    }
    rule_version = version_of(summary)
    if rule_version is not None:
        fields["rule_version"] = rule_version
    return fields


FIGURES = (
    "read",
    "considered",
    "matched",
    "failed",
    "actions_fired",
    "actions_failed",
    "actions_skipped",
    "chunks_done",
    "chunks",
)


def figure_fields(figures: dict) -> dict:
    """The RuleRun's figures under way from the cluster job's progress.json (`_figures`' keys)."""
    return {name: int(figures[name]) for name in FIGURES if name in figures}


def version_of(summary: dict) -> int | None:
    versions = {r.get("version") for r in summary.get("per_rule", {}).values()}
    versions.discard(None)
    return versions.pop() if len(versions) == 1 else None
