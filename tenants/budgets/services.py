"""Budget writes: set or delete a tenant's monthly budget, and the spend control it drives.

`at_limit` says what happens at 100 %: `notify` only, or `degrade`: the tenant's flag
`Tenant.budget_degraded` is set and announced (`tenant.settings`, the change notification every
broker node follows), so each node's directory re-reads the tenant policy and refuses new
CONNECTs with 0x97 "monthly budget reached"; connected devices keep working. Whatever lifts the
condition (a higher budget, `notify`, no budget, a new month) clears the flag the same way, at
once when it is a change made here, within a check (`tenants/budgets/alerts.py`) for a new month.

Reads are in `tenants.budgets.selectors`; the alerts in `tenants.budgets.alerts`.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from common.contracts.notifications import ChangeKind
from common.security.sealed import seal
from common.webhooks.destinations import url_problem
from tenants.budgets.selectors import DEFAULT_THRESHOLDS, month_to_date_spend
from tenants.models import Budget, Tenant
from tenants.notify import announce

FIELDS = {"monthly_cents", "thresholds", "at_limit", "webhook_url", "rotate_webhook_secret"}
MAX_MONTHLY_CENTS = 10**12  # ten billion in the major unit: anything above is a typo
MAX_THRESHOLDS = 10
MAX_THRESHOLD = 1000  # percent: 150 % is a fair alert to want, 100,000 % is not
SECRET_BYTES = 32


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _monthly_cents(value: Any) -> int:
    number = _whole(value)
    if number is None or not 1 <= number <= MAX_MONTHLY_CENTS:
        raise ValidationError(
            {
                "monthly_cents": [
                    f"Must be a whole number of cents from 1 to {MAX_MONTHLY_CENTS}, "
                    f"e.g. 2500 for 25.00; got {value!r}."
                ]
            }
        )
    return number


def _thresholds(value: Any, at_limit: str) -> list[int]:
    if value is None:
        return list(DEFAULT_THRESHOLDS)
    if not isinstance(value, list) or len(value) > MAX_THRESHOLDS:
        raise ValidationError(
            {"thresholds": [f"Must be a list of at most {MAX_THRESHOLDS} percentages."]}
        )
    numbers = [_whole(item) for item in value]
    bad = [
        item
        for item, n in zip(value, numbers, strict=True)
        if n is None or not 1 <= n <= MAX_THRESHOLD
    ]
    if bad:
        raise ValidationError(
            {
                "thresholds": [
                    f"Each threshold is a whole percentage from 1 to {MAX_THRESHOLD}; "
                    f"not {bad[0]!r}."
                ]
            }
        )
    if len(set(numbers)) != len(numbers):
        raise ValidationError({"thresholds": ["Each threshold may appear once."]})
    if at_limit == Budget.AtLimit.DEGRADE and 100 not in numbers:
        raise ValidationError(
            {
                "thresholds": [
                    "Must include 100 when at_limit is degrade: new connections are refused "
                    "from 100 %, and that is always announced."
                ]
            }
        )
    return sorted(numbers)  # type: ignore[arg-type]


def _at_limit(value: Any) -> str:
    if value is None:
        return Budget.AtLimit.NOTIFY
    if value not in Budget.AtLimit.values:
        raise ValidationError({"at_limit": [f"Must be notify or degrade; got {value!r}."]})
    return value


def _webhook_url(value: Any) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > 2048 or any(c.isspace() for c in value):
        raise ValidationError(
            {"webhook_url": ["Must be an http:// or https:// URL of at most 2048 characters."]}
        )
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(
            {"webhook_url": [f"Must be an http:// or https:// URL with a host: {value!r}."]}
        )
    if parts.username or parts.password:
        raise ValidationError(
            {"webhook_url": ["Must not carry credentials: the secret signs each call."]}
        )
    problem = url_problem(value)
    if problem is not None:
        raise ValidationError({"webhook_url": [f"{value!r}: {problem}."]})
    return value


@transaction.atomic
def budget_set(tenant: Tenant, data: dict[str, Any]) -> tuple[Budget, str | None]:
    """Set the tenant's budget from `data` (the API's body: `monthly_cents` required;
    `thresholds` [50, 80, 100], `at_limit` notify, `webhook_url` none by default;
    `rotate_webhook_secret` true issues a new secret). Returns the budget and, when one was
    issued, the webhook's signing secret: shown this once, stored sealed. The spend control
    follows the new budget at once."""
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": ["Send a JSON object."]})
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise ValidationError(
            {key: [f"Not a budget field; fields: {', '.join(sorted(FIELDS))}."] for key in unknown}
        )
    if "monthly_cents" not in data:
        raise ValidationError({"monthly_cents": ["Required: the budget in cents, e.g. 2500."]})
    monthly = _monthly_cents(data["monthly_cents"])
    at_limit = _at_limit(data.get("at_limit"))
    thresholds = _thresholds(data.get("thresholds"), at_limit)
    url = _webhook_url(data.get("webhook_url"))
    rotate = data.get("rotate_webhook_secret", False)
    if not isinstance(rotate, bool):
        raise ValidationError({"rotate_webhook_secret": ["Must be true or false."]})
    budget = Budget.objects.select_for_update().filter(tenant=tenant).first()
    if budget is None:
        budget = Budget(tenant=tenant)
    issued = None
    if not url:
        budget.webhook_secret = ""
    elif rotate or not budget.webhook_secret:
        issued = secrets.token_urlsafe(SECRET_BYTES)
        budget.webhook_secret = seal(issued)
    budget.monthly_cents, budget.thresholds, budget.at_limit = monthly, thresholds, at_limit
    budget.webhook_url = url
    budget.updated_at = timezone.now()
    budget.save()
    degrade_sync(tenant, budget)
    return budget, issued


@transaction.atomic
def budget_delete(tenant: Tenant) -> bool:
    """No budget any more (its alerts stay on record); new connections are accepted again."""
    deleted, _ = Budget.objects.filter(tenant=tenant).delete()
    degrade_sync(tenant, None)
    return bool(deleted)


def degrade_due(budget: Budget | None, spend_cents: int) -> bool:
    return (
        budget is not None
        and budget.at_limit == Budget.AtLimit.DEGRADE
        and spend_cents >= budget.monthly_cents
    )


def degrade_sync(
    tenant: Tenant,
    budget: Budget | None,
    *,
    spend_cents: int | None = None,
    now: datetime | None = None,
) -> bool | None:
    """Set or clear the tenant's degrade flag to match its budget and spend (the month to date,
    unless given); announce a change so every broker node applies it. Returns the new value
    when it changed, else None. A conditional update: two processes agreeing change it once."""
    if budget is None:
        due = False
    else:
        if spend_cents is None:
            spend_cents = month_to_date_spend(tenant=tenant, now=now)["spend_cents"]
        due = degrade_due(budget, spend_cents)
    changed = Tenant.objects.filter(id=tenant.id, budget_degraded=not due).update(
        budget_degraded=due
    )
    tenant.budget_degraded = due
    if not changed:
        return None
    announce(tenant.slug, ChangeKind.TENANT_SETTINGS)
    return due


@transaction.atomic
def budgets_reseal_secrets() -> dict[str, int]:
    """Every budget's webhook secret sealed under the current `SEALING_KEY` (a rotation's last
    step, as `rules.services.rules_reseal_secrets` for the rules)."""
    from common.security import sealed

    counts = {"budgets": 0, "resealed": 0, "current": 0, "unopened": 0}
    for budget in Budget.objects.select_for_update().exclude(webhook_secret=""):
        counts["budgets"] += 1
        try:
            again = sealed.reseal(budget.webhook_secret)
        except sealed.SealError:
            counts["unopened"] += 1
            continue
        if again == budget.webhook_secret:
            counts["current"] += 1
        else:
            Budget.objects.filter(id=budget.id).update(webhook_secret=again)
            counts["resealed"] += 1
    return counts
