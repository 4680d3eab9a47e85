"""Reads of a tenant's rules, their counters and dead letters."""

from __future__ import annotations

from django.db.models import Count, QuerySet
from django.http import Http404

from tenants.models import (
    Rule,
    RuleDeadLetter,
    RuleMetrics,
    Tenant,
)


def rules_list(*, tenant: Tenant, name: str | None = None) -> QuerySet[Rule]:
    """The tenant's rules with their metrics row (if the jobs wrote one) and dead-letter count."""
    rules = (
        Rule.objects.filter(tenant=tenant)
        .select_related("metrics")
        .annotate(dead_letters_count=Count("dead_letters"))
        .order_by("name")  # a stable order: pages of the list never repeat or skip a rule
    )
    if name:
        rules = rules.filter(name__icontains=name)
    return rules


def rule_get(*, tenant: Tenant, name: str) -> Rule:
    rule = rules_list(tenant=tenant).filter(name=name).first()
    if rule is None:
        raise Http404(f"No rule named {name!r}.")
    return rule


RULE_METRIC_COUNTERS = ("matched", "passed", "failed", "actions_ok", "actions_failed")


def rule_metrics(rule: Rule) -> dict:
    """The rule's counters as the jobs last wrote them; zeros before they ever ran it."""
    try:
        metrics = rule.metrics
    except RuleMetrics.DoesNotExist:
        metrics = None
    if metrics is None:
        return {
            **dict.fromkeys(RULE_METRIC_COUNTERS, 0),
            "last_error": "",
            "last_error_at": None,
            "lag_ms": None,
            "latency_p50_ms": None,
            "latency_p99_ms": None,
            "updated_at": None,
        }
    return {
        **{key: getattr(metrics, key) for key in RULE_METRIC_COUNTERS},
        "last_error": metrics.last_error,
        "last_error_at": metrics.last_error_at,
        "lag_ms": metrics.lag_ms,
        "latency_p50_ms": metrics.latency_p50_ms,
        "latency_p99_ms": metrics.latency_p99_ms,
        "updated_at": metrics.updated_at,
    }


def rule_dead_letters_list(*, rule: Rule) -> QuerySet[RuleDeadLetter]:
    return RuleDeadLetter.objects.filter(rule=rule)


def rule_dead_letters_count(*, rule: Rule) -> int:
    return rule_dead_letters_list(rule=rule).count()
