"""Budget and quota alerts: the check Celery beat runs every `BUDGET_CHECK_SECONDS` (60).

Each run, for every tenant with a budget (or with its degrade flag set), prices the month to date
(`budget_selectors.month_to_date_spend`, to the cent as the invoice will), alerts each threshold
crossed and sets or clears the spend control (`budgets.degrade_sync`). For every tenant it also
alerts a quota nearing: live connections at 80 % of `max_connections`, the month's messages at
80 % of those the price book includes.

Once per threshold per month: an alert is a `BudgetAlert` row whose unique key is (tenant, month,
kind, threshold, limit), claimed before anything is sent, so two runs (two beat ticks, two
workers) agree on one row. Its email (to the tenant's owners) and its signed webhook (the
budget's `webhook_url`, when set) are then sent under a row lock taken with SKIP LOCKED, each
recorded when it went: a run that finds the row locked leaves it to the one sending, and a failed
send is tried again by the next runs (`MAX_ATTEMPTS` in all). The amount is part of the key: a
raised budget has thresholds of its own.
"""

from __future__ import annotations

import logging
import smtplib
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from common.security.sealed import SealError, unseal
from common.webhooks.delivery import Timeouts, post_signed
from tenants.billing.invoice_render import money
from tenants.budgets import services as budgets
from tenants.budgets.selectors import (
    month_to_date_spend,
    percent_of,
    usage_month_to_date_by_tenant,
)
from tenants.devices.selectors import PRESENCE_STALE_AFTER
from tenants.models import Budget, BudgetAlert, DeviceConnection, Membership, Tenant
from tenants.tenant.selectors import effective_quota

log = logging.getLogger(__name__)

QUOTA_NEARING_PERCENT = 80
MAX_ATTEMPTS = 5  # runs that try a failed email or webhook again (one a minute)
WEBHOOK_TIMEOUTS = Timeouts(connect=3.0, first_byte=5.0, total=8.0)
EVENT_BUDGET = "budget.threshold"
EVENT_QUOTA = "quota.nearing"


def check_all(*, now: datetime | None = None) -> dict[str, int]:
    """One run over every tenant; returns counts (for the task's result and the tests)."""
    now = now or datetime.now(UTC)
    usage = usage_month_to_date_by_tenant(now=now)
    live = dict(
        DeviceConnection.objects.filter(heartbeat_at__gt=now - PRESENCE_STALE_AFTER)
        .values_list("tenant_id")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "n")
    )
    budgeted = {b.tenant_id: b for b in Budget.objects.all()}
    tenants = Tenant.objects.select_related("plan").filter(
        Q(id__in=set(usage) | set(live) | set(budgeted)) | Q(budget_degraded=True)
    )
    summary = {"tenants": 0, "alerts": 0, "degraded": 0, "lifted": 0}
    books: dict[int, Any] = {}
    for tenant in tenants:
        try:
            claimed, changed = tenant_check(
                tenant,
                budgeted.get(tenant.id),
                usage=usage.get(tenant.id, {}),
                connections=live.get(tenant.id, 0),
                now=now,
                books=books,
            )
        except Exception:  # one tenant's problem (a price book gap) never stops the others
            log.exception("budget check of %s failed", tenant.slug)
            continue
        summary["tenants"] += 1
        summary["alerts"] += len(claimed)
        summary["degraded"] += changed is True
        summary["lifted"] += changed is False
    summary["sent"] = deliver_pending()
    return summary


def tenant_check(
    tenant: Tenant,
    budget: Budget | None,
    *,
    usage: dict[str, int],
    connections: int,
    now: datetime,
    books: dict[int, Any] | None = None,
) -> tuple[list[BudgetAlert], bool | None]:
    """The alerts newly claimed for one tenant, and the degrade flag's change (None: none).
    `books`: the price books of this run by plan id (a tenant without a budget needs only its
    plan's included messages, not its month priced)."""
    from tenants.billing.services import price_book_for

    period = now.strftime("%Y-%m")
    claimed = []
    if budget is None:
        changed = budgets.degrade_sync(tenant, None)
        books = {} if books is None else books
        if tenant.plan_id not in books:
            books[tenant.plan_id] = price_book_for(tenant.plan, period)
        book = books[tenant.plan_id]
    else:
        spend = month_to_date_spend(tenant=tenant, now=now, usage=usage)
        book = spend["price_book"]
        # The spend control first: the 100 % alert says whether new connections are refused.
        changed = budgets.degrade_sync(tenant, budget, spend_cents=spend["spend_cents"])
        for threshold in budget.thresholds:
            if spend["spend_cents"] * 100 >= threshold * budget.monthly_cents:
                claimed.append(
                    _claim(
                        tenant,
                        period,
                        BudgetAlert.Kind.BUDGET,
                        threshold,
                        limit=budget.monthly_cents,
                        value=spend["spend_cents"],
                        currency=spend["currency"],
                        budget=budget,
                    )
                )
    max_connections = effective_quota(tenant).get("max_connections") or 0
    included = int(book.dimensions.get("messages", {}).get("included", 0) or 0)
    nearing = (
        (BudgetAlert.Kind.CONNECTIONS, max_connections, connections),
        (BudgetAlert.Kind.INCLUDED_MESSAGES, included, usage.get("messages", 0)),
    )
    for kind, limit, used in nearing:
        if limit and used * 100 >= QUOTA_NEARING_PERCENT * limit:
            claimed.append(
                _claim(
                    tenant,
                    period,
                    kind,
                    QUOTA_NEARING_PERCENT,
                    limit=limit,
                    value=used,
                    currency="",
                    budget=budget,
                )
            )
    return [alert for alert in claimed if alert is not None], changed


def _owners(tenant: Tenant) -> list[str]:
    return sorted(
        Membership.objects.filter(
            tenant=tenant, role=Membership.Role.OWNER, user__is_active=True
        ).values_list("user__email", flat=True)
    )


def _claim(
    tenant: Tenant,
    period: str,
    kind: str,
    threshold: int,
    *,
    limit: int,
    value: int,
    currency: str,
    budget: Budget | None,
) -> BudgetAlert | None:
    """The alert's row if this run made it (None: an earlier run or another process did)."""
    key = {"tenant": tenant, "period": period, "kind": kind, "threshold": threshold}
    if BudgetAlert.objects.filter(**key, limit=limit).exists():
        return None
    try:
        with transaction.atomic():
            return BudgetAlert.objects.create(
                **key,
                limit=limit,
                value=value,
                currency=currency,
                email_to=_owners(tenant),
                webhook_url=budget.webhook_url if budget is not None else "",
            )
    except IntegrityError:  # another process claimed it between the look and the insert
        return None


def deliver_pending() -> int:
    """Send what claimed alerts still owe (an email, a webhook); returns the sends made.
    `MAX_ATTEMPTS` bounds the retries (an alert claimed just before a month ends is sent too)."""
    pending = (
        BudgetAlert.objects.filter(
            Q(email_sent_at=None) & ~Q(email_to=[]) | Q(webhook_sent_at=None) & ~Q(webhook_url=""),
            attempts__lt=MAX_ATTEMPTS,
        )
        .order_by("id")
        .values_list("id", flat=True)
    )
    return sum(deliver(alert_id) for alert_id in list(pending))


def deliver(alert_id: int) -> int:
    """Send one alert's email and webhook if still owed, under its row lock (SKIP LOCKED:
    another process sending it is left to it). Returns the sends made."""
    sent = 0
    with transaction.atomic():
        alert = (
            BudgetAlert.objects.select_for_update(skip_locked=True)
            .select_related("tenant")
            .filter(id=alert_id)
            .first()
        )
        if alert is None or alert.attempts >= MAX_ATTEMPTS:
            return 0
        subject, words = alert_words(alert)
        if alert.email_to and alert.email_sent_at is None:
            try:
                send_mail(subject, _email_body(alert, words), None, list(alert.email_to))
            except (OSError, smtplib.SMTPException) as exc:
                alert.email_error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("budget alert mail not sent: %s", alert.email_error)
            else:
                alert.email_sent_at, alert.email_error = timezone.now(), ""
                sent += 1
        if alert.webhook_url and alert.webhook_sent_at is None:
            error = _post(alert, words)
            if error:
                alert.webhook_error = error[:300]
            else:
                alert.webhook_sent_at, alert.webhook_error = timezone.now(), ""
                sent += 1
        alert.attempts += 1
        alert.save()
    return sent


def _post(alert: BudgetAlert, words: str) -> str:
    """The webhook call; an error in words, or "" when the receiver took it."""
    budget = Budget.objects.filter(tenant_id=alert.tenant_id).first()
    if budget is None or not budget.webhook_secret or budget.webhook_url != alert.webhook_url:
        return "webhook: the budget's webhook changed or was removed; not sent"
    try:
        secret = unseal(budget.webhook_secret)
    except SealError as exc:
        return f"webhook: {exc}"
    result = post_signed(
        alert.webhook_url,
        secret,
        webhook_body(alert, words),
        rule_id=None,
        attempts=1,
        timeouts=WEBHOOK_TIMEOUTS,
        headers=(("X-Event", _event(alert)),),
    )
    return "" if result.ok else result.error


def _event(alert: BudgetAlert) -> str:
    return EVENT_BUDGET if alert.kind == BudgetAlert.Kind.BUDGET else EVENT_QUOTA


def webhook_body(alert: BudgetAlert, words: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "event": _event(alert),
        "id": alert.id,
        "tenant": alert.tenant.slug,
        "period": alert.period,
        "threshold": alert.threshold,
        "time": alert.created_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "message": words,
    }
    if alert.kind == BudgetAlert.Kind.BUDGET:
        body.update(
            spend_cents=alert.value,
            budget_cents=alert.limit,
            currency=alert.currency,
            degraded=alert.tenant.budget_degraded and alert.value >= alert.limit,
        )
    else:
        body.update(quota=alert.kind, used=alert.value, limit=alert.limit)
    return body


def alert_words(alert: BudgetAlert) -> tuple[str, str]:
    """(an email subject, a sentence) saying what was crossed."""
    slug = alert.tenant.slug
    if alert.kind == BudgetAlert.Kind.BUDGET:
        spent = money(alert.value, alert.currency)
        budget = money(alert.limit, alert.currency)
        sentence = (
            f"{slug} has spent {spent} of its monthly budget of {budget} in {alert.period} "
            f"({percent_of(alert.value, alert.limit):g} %): the {alert.threshold} % threshold."
        )
        if alert.threshold >= 100 and alert.tenant.budget_degraded:
            sentence += (
                " The budget says degrade: new connections are refused (CONNACK 0x97, "
                '"monthly budget reached") until the budget is raised, set to notify or '
                "removed, or the month ends; connected devices keep working."
            )
        return f"{slug}: {alert.threshold} % of the monthly budget ({spent} of {budget})", sentence
    if alert.kind == BudgetAlert.Kind.CONNECTIONS:
        sentence = (
            f"{slug} has {alert.value:,} devices connected of the {alert.limit:,} its plan "
            f"allows (max_connections): {alert.threshold} % or more. Beyond the limit new "
            "connections are refused."
        )
        return f"{slug}: {alert.threshold} % of the connection limit", sentence
    sentence = (
        f"{slug} has used {alert.value:,} of the {alert.limit:,} messages (5 KB units) its "
        f"plan includes in {alert.period}: {alert.threshold} % or more. Beyond them messages "
        "are billed at the plan's price."
    )
    return f"{slug}: {alert.threshold} % of the month's included messages", sentence


def _email_body(alert: BudgetAlert, words: str) -> str:
    link = settings.PORTAL_URL.rstrip("/") + "/budget/"
    return f"{words}\n\nSee the month to date and change the budget: {link}\n"
