"""Reads of a rule's runs over history, always through the rule (so through its tenant): another
tenant's run id is a 404 like any unknown one."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet
from django.http import Http404

from tenants.models import Rule, RuleRun


def runs_list(*, rule: Rule) -> QuerySet[RuleRun]:
    return RuleRun.objects.filter(rule=rule, tenant_id=rule.tenant_id).order_by("-created_at")


def run_get(*, rule: Rule, run_id: str) -> RuleRun:
    try:
        key = uuid.UUID(str(run_id))
    except ValueError:
        raise Http404("No such run.") from None
    run = runs_list(rule=rule).filter(id=key).first()
    if run is None:
        raise Http404("No such run.")
    return run


def runs_active(*, rule: Rule) -> QuerySet[RuleRun]:
    return runs_list(rule=rule).filter(state__in=RuleRun.ACTIVE)


def run_progress(run: RuleRun) -> float:
    """0..1: chunks of hours done (a run of one chunk jumps from 0 to 1)."""
    if run.state == RuleRun.State.DONE:
        return 1.0
    if not run.chunks:
        return 0.0
    return round(min(1.0, run.chunks_done / run.chunks), 3)
