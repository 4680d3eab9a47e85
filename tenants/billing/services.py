"""Billing services: price books (versioned per plan) and invoices from the Spark billing job.

Writes go through here; reads the portal and the API need are in `tenants.billing.selectors`.
The pricing itself is `common.charges.pricing` (shared with the job); the job is `spark.billing.job`.

An invoice is a draft until issued. Re-running a period rewrites its drafts and never an issued
invoice: usage that reaches the log after an issue becomes an adjustment line on the next invoice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, date, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from common.charges.pricing import (
    LATER_DIMENSIONS,
    USAGE_COLUMN,
    PriceBookError,
    canonical_json,
    sha256_hex,
    validate_price_book,
)
from tenants.models import Credit, Invoice, Plan, PriceBook, Tenant, TenantPlanChange

# Months back whose issued invoices a run re-checks for late usage.
ADJUSTMENT_LOOKBACK_MONTHS = 3

# The list prices a plan gets when it has no price book yet (AWS IoT Core's, US East).
LIST_DIMENSIONS = {
    "messages": {
        "per": 1_000_000,
        "tiers": [
            {"up_to": 1_000_000_000, "price": "1.00"},
            {"up_to": 5_000_000_000, "price": "0.80"},
            {"up_to": None, "price": "0.70"},
        ],
    },
    "connection_minutes": {"per": 1_000_000, "tiers": [{"up_to": None, "price": "0.08"}]},
    "rules_triggered": {"per": 1_000_000, "tiers": [{"up_to": None, "price": "0.15"}]},
    "actions_executed": {"per": 1_000_000, "tiers": [{"up_to": None, "price": "0.15"}]},
    "storage_gb_hours": {"per": 1, "tiers": [{"up_to": None, "price": "0.0002"}]},
    "job_executions": {
        "per": LATER_DIMENSIONS["job_executions"]["per"],
        "tiers": LATER_DIMENSIONS["job_executions"]["tiers"],
    },
    # AWS IoT Device Shadow: $1.25 per million operations, in 1 KB increments (issue 44).
    "shadow_operations": {
        "per": LATER_DIMENSIONS["shadow_operations"]["per"],
        "tiers": LATER_DIMENSIONS["shadow_operations"]["tiers"],
    },
}
FREE_TIER = {
    "messages": 1_000_000,
    "connection_minutes": 2_250_000,
    "rules_triggered": 250_000,
    "actions_executed": 250_000,
    "storage_gb_hours": 100,
    # Like every other unit of the Free plan, an allowance before the first is billed (issue
    # 41): 1,000 a month, $3.00 at list price, beside 1,000,000 messages ($1.00) and 2,250,000
    # connection minutes ($1.80). Migration 0031 gives existing Free price books the same.
    "job_executions": 1_000,
    # AWS's free tier: 225,000 shadow operations a month. Migration 0035 gives existing Free
    # price books the same, with the price, from their first month not yet invoiced.
    "shadow_operations": 225_000,
}


def _period_start(period: str) -> date:
    try:
        year, month = (int(part) for part in period.split("-"))
        return date(year, month, 1)
    except ValueError:
        raise ValidationError({"period": [f"{period!r}: use YYYY-MM, e.g. 2026-10."]}) from None


def _months_before(period: str, count: int) -> list[str]:
    start = _period_start(period)
    out, year, month = [], start.year, start.month
    for _ in range(count):
        year, month = (year, month - 1) if month > 1 else (year - 1, 12)
        out.append(f"{year:04d}-{month:02d}")
    return out


# -- price books ---------------------------------------------------------------------------------


@transaction.atomic
def price_book_set(
    plan: Plan,
    *,
    effective_from: date,
    dimensions: dict[str, Any],
    base_fee_cents: int,
    currency: str = "USD",
) -> PriceBook:
    """A new version of the plan's prices from `effective_from`. Issued invoices keep theirs."""
    try:
        validate_price_book(dimensions, currency, base_fee_cents)
    except PriceBookError as exc:
        raise ValidationError({k: [v] for k, v in exc.fields.items()}) from None
    books = PriceBook.objects.select_for_update().filter(plan=plan)
    if books.filter(effective_from=effective_from).exists():
        raise ValidationError(
            {"effective_from": [f"{plan.slug} already has prices from {effective_from}."]}
        )
    issued = Invoice.objects.filter(
        tenant__plan=plan, status__in=[Invoice.Status.ISSUED, Invoice.Status.PAID]
    ).order_by("-period")
    latest = issued.first()
    if latest is not None and effective_from <= _period_start(latest.period):
        raise ValidationError(
            {
                "effective_from": [
                    f"{latest.period} is already invoiced on {plan.slug}: "
                    f"new prices can start from the month after."
                ]
            }
        )
    version = (books.order_by("-version").values_list("version", flat=True).first() or 0) + 1
    return PriceBook.objects.create(
        plan=plan,
        version=version,
        effective_from=effective_from,
        currency=currency.upper(),
        base_fee_cents=base_fee_cents,
        dimensions=dimensions,
    )


def price_book_default(plan: Plan) -> PriceBook:
    """Version 1 of a plan that has none: its monthly price, list unit prices, and for the free
    plan a free tier."""
    dimensions = {}
    for name, spec in LIST_DIMENSIONS.items():
        spec = {**spec, "included": FREE_TIER[name] if plan.monthly_price_cents == 0 else 0}
        if name == "messages" and plan.price_per_million_messages_cents:
            first = {"up_to": None, "price": str(plan.price_per_million_messages_cents / 100)}
            spec["tiers"] = [first]
        dimensions[name] = spec
    book, _ = PriceBook.objects.get_or_create(
        plan=plan,
        version=1,
        defaults={
            "effective_from": date(2000, 1, 1),
            "base_fee_cents": plan.monthly_price_cents,
            "dimensions": dimensions,
        },
    )
    return book


def price_book_for(plan: Plan, period: str) -> PriceBook:
    """The version in force on the first day of `period`."""
    start = _period_start(period)
    book = (
        PriceBook.objects.filter(plan=plan, effective_from__lte=start)
        .order_by("-effective_from")
        .first()
    )
    if book is None:
        if PriceBook.objects.filter(plan=plan).exists():
            raise ValidationError({"period": [f"{plan.slug} has no prices in force on {start}."]})
        book = price_book_default(plan)
    return book


# -- invoices ------------------------------------------------------------------------------------


def _billed_usage(tenant: Tenant, period: str, before: str) -> tuple[PriceBook, dict[str, int]]:
    """What has been billed for `period` by the invoices issued before `before`: its issued
    invoice's usage plus the deltas of adjustment lines for it on later issued invoices."""
    invoices = Invoice.objects.filter(
        tenant=tenant,
        status__in=[Invoice.Status.ISSUED, Invoice.Status.PAID],
        period__gte=period,
        period__lt=before,
    ).order_by("period")
    issued = invoices[0]
    billed = dict(issued.parsed_document()["usage"])
    for later in invoices[1:]:
        for line in later.line_items:
            if line.get("code") == "adjustment" and line.get("for_period") == period:
                column = USAGE_COLUMN[line["dimension"]]
                billed[column] = billed.get(column, 0) + line["usage_delta"]
    return issued.price_book, billed


def plan_terms(tenant: Tenant, period: str) -> tuple[Plan, list[dict[str, Any]]]:
    """The plan whose prices the period's usage is billed at (the one held on its last day) and
    the base-fee terms: empty when the tenant held that one plan the whole period (the full
    monthly fee), else one term per plan held, by whole UTC days (see
    `common.charges.pricing.prorated_base_fee_line`): from the day the tenant was created or moved to the
    plan, to the day before it moved off it, or the period's last day."""
    start = _period_start(period)
    end = date(start.year + start.month // 12, start.month % 12 + 1, 1)
    period_days = (end - start).days
    last = end - timedelta(days=1)
    changes = list(
        TenantPlanChange.objects.filter(tenant=tenant)
        .select_related("from_plan", "to_plan")
        .order_by("effective_at", "id")
    )

    def plan_on(day: date) -> Plan:
        held = None
        for change in changes:
            if change.effective_at.astimezone(UTC).date() <= day:
                held = change.to_plan
            elif held is None:
                return change.from_plan
            else:
                break
        return held or tenant.plan

    first = max(start, tenant.created_at.astimezone(UTC).date())
    spans: list[list[Any]] = []  # [plan, first day, last day]
    day = first
    while day <= last:
        plan = plan_on(day)
        if spans and spans[-1][0].id == plan.id:
            spans[-1][2] = day
        else:
            spans.append([plan, day, day])
        day += timedelta(days=1)
    if not spans:  # created after the period: nothing held (not billed, see billing_accounts)
        return tenant.plan, []
    final = spans[-1][0]
    if len(spans) == 1 and spans[0][1] == start:
        return final, []
    terms = [
        {
            "plan": plan.slug,
            "base_fee_cents": price_book_for(plan, period).base_fee_cents,
            "first_day": a.isoformat(),
            "last_day": b.isoformat(),
            "period_days": period_days,
        }
        for plan, a, b in spans
    ]
    return final, terms


def billing_accounts(
    period: str, tenant: Tenant | None = None
) -> list[tuple[Tenant, PriceBook, list[dict[str, Any]]]]:
    """Tenants that existed during the period, each with the price book its usage is billed at
    and its base-fee terms (prorated when it started or changed plan during the period)."""
    start = _period_start(period)
    end = date(start.year + start.month // 12, start.month % 12 + 1, 1)
    tenants = (
        Tenant.objects.select_related("plan").filter(created_at__date__lt=end).order_by("slug")
    )
    if tenant is not None:
        tenants = tenants.filter(id=tenant.id)
    out = []
    for t in tenants:
        plan, terms = plan_terms(t, period)
        out.append((t, price_book_for(plan, period), terms))
    return out


def job_accounts(
    period: str, pairs: list[tuple[Tenant, PriceBook, list[dict[str, Any]]]]
) -> list[Any]:
    from spark.billing.job import Account, IssuedPeriod

    months = _months_before(period, ADJUSTMENT_LOOKBACK_MONTHS)
    accounts = []
    for tenant, book, terms in pairs:
        issued = []
        for month in sorted(
            Invoice.objects.filter(
                tenant=tenant,
                period__in=months,
                status__in=[Invoice.Status.ISSUED, Invoice.Status.PAID],
            ).values_list("period", flat=True)
        ):
            month_book, billed = _billed_usage(tenant, month, period)
            issued.append(IssuedPeriod(month, month_book.as_document(), billed))
        credits = tuple(
            {"amount_cents": c.amount_cents, "reason": c.reason}
            for c in Credit.objects.filter(tenant=tenant, period=period).order_by("id")
        )
        accounts.append(
            Account(tenant.slug, book.as_document(), tuple(issued), credits, tuple(terms))
        )
    return accounts


def run_billing_job(
    period: str,
    tenant: Tenant | None = None,
    progress: Callable[[str], None] = lambda step: None,
    spark: Any = None,
) -> tuple[Any, dict[str, PriceBook]]:
    """Run the Spark job for the period (all tenants, or one); returns its result and the price
    book of each tenant. With `SPARK_RUNNER=emr-serverless` (and no `spark` given) the job is
    submitted to the cluster (`tenants.billing.cluster`)."""
    from common.stores.object_store import open_object_store
    from spark.billing import job
    from spark.cluster.emr_serverless import EMR_SERVERLESS, spark_runner
    from spark.session import build_session

    _period_start(period)
    progress("loading price books")
    pairs = billing_accounts(period, tenant)
    books = {t.slug: book for t, book, _ in pairs}
    accounts = job_accounts(period, pairs)
    progress("starting Spark")
    if spark is None and spark_runner() == EMR_SERVERLESS:
        from tenants.billing.cluster import billing_on_cluster

        return billing_on_cluster(period, accounts, progress), books
    spark = spark or build_session("billing")
    result = job.run(spark, open_object_store(), period, accounts, progress)
    return result, books


@transaction.atomic
def invoices_store(
    result: Any, books: dict[str, PriceBook], *, issue: bool = False
) -> list[dict[str, Any]]:
    """Write the job's documents as invoices: drafts are replaced, issued ones never touched
    (reported as `unchanged` or `differs`). With `issue`, drafts become issued."""
    from tenants.billing import invoicing

    # Issuing locks the numbering first, before any invoice row (tenants/billing/invoicing.py).
    counter = invoicing.numbering_lock() if issue else None
    tenants = {
        t.slug: t for t in Tenant.objects.filter(slug__in=[d["tenant"] for d in result.invoices])
    }
    out = []
    for document in result.invoices:
        tenant = tenants[document["tenant"]]
        body = canonical_json(document).decode()
        checksum = sha256_hex(body.encode())
        invoice = (
            Invoice.objects.select_for_update()
            .filter(tenant=tenant, period=document["period"])
            .first()
        )
        if invoice is not None and invoice.status != Invoice.Status.DRAFT:
            state = "unchanged" if invoice.checksum == checksum else "differs"
            out.append(_summary(invoice, state))
            continue
        book = books[tenant.slug]
        fields = {
            "currency": document["currency"],
            "total_cents": document["total_cents"],
            "line_items": document["lines"],
            "document": body,
            "checksum": checksum,
            "input_checksum": document["input_checksum"],
            "price_book": book,
            "price_book_version": book.version,
            "created_at": timezone.now(),
        }
        if issue:
            fields.update(status=Invoice.Status.ISSUED, issued_at=timezone.now())
        invoice, _ = Invoice.objects.update_or_create(
            tenant=tenant, period=document["period"], defaults=fields
        )
        if counter is not None:
            invoicing.finalize(invoice, counter)
        out.append(_summary(invoice, "issued" if issue else "draft"))
    return out


def _summary(invoice: Invoice, state: str) -> dict[str, Any]:
    return {
        "tenant": invoice.tenant.slug,
        "period": invoice.period,
        "state": state,
        "status": invoice.status,
        "total_cents": invoice.total_cents,
        "currency": invoice.currency,
        "checksum": invoice.checksum,
        "price_book_version": invoice.price_book_version,
        "number": invoice.number,
        "tax_cents": invoice.tax_cents,
        "total_due_cents": invoice.total_due_cents,
    }


def period_unfinished(period: str, now: Any = None) -> str | None:
    """Why `period` may not be issued yet (it has not ended), or None."""
    from datetime import datetime

    start = _period_start(period)
    end = date(start.year + start.month // 12, start.month % 12 + 1, 1)
    now = now or datetime.now(UTC)
    if now.astimezone(UTC).date() >= end:
        return None
    return (
        f"{period} has not ended (it ends {end.isoformat()} 00:00 UTC): issuing it now would "
        "bill part of the month and freeze it (issued invoices never change; later usage "
        "becomes an adjustment next month). Run without --issue for a draft, or add --force "
        "to issue it anyway."
    )


def billing_report(
    period: str,
    *,
    tenant: Tenant | None = None,
    issue: bool = False,
    force: bool = False,
    progress: Callable[[str], None] = lambda step: None,
    spark: Any = None,
) -> dict[str, Any]:
    """The billing job for a period, its invoices stored; the JSON summary of the command.
    Issuing a period that has not ended is refused unless `force`."""
    if issue and not force:
        problem = period_unfinished(period)
        if problem:
            raise ValidationError({"period": [problem]})
    started = time.monotonic()
    result, books = run_billing_job(period, tenant, progress, spark)
    progress("storing invoices")
    invoices = invoices_store(result, books, issue=issue)
    return {
        "period": period,
        "tenants": len(invoices),
        "segments": result.files,
        "usage_rows": result.rows,
        "revenue": result.revenue,
        "invoices": invoices,
        "seconds": round(time.monotonic() - started, 2),
    }


def billing_verify(
    period: str, *, spark: Any = None, progress: Callable[[str], None] = lambda step: None
) -> dict[str, Any]:
    """Re-run a period and compare with its issued invoices, line by line; stores nothing."""
    issued = {
        i.tenant.slug: i
        for i in Invoice.objects.select_related("tenant").filter(
            period=period, status__in=[Invoice.Status.ISSUED, Invoice.Status.PAID]
        )
    }
    pairs = [
        (
            i.tenant,
            i.price_book or price_book_for(i.tenant.plan, period),
            plan_terms(i.tenant, period)[1],
        )
        for i in issued.values()
    ]
    from common.stores.object_store import open_object_store
    from spark.billing import job
    from spark.session import build_session

    accounts = job_accounts(period, pairs)
    spark = spark or build_session("billing")
    result = job.run(spark, open_object_store(), period, accounts, progress)
    differences = []
    for document in result.invoices:
        invoice = issued[document["tenant"]]
        if sha256_hex(canonical_json(document)) == invoice.checksum:
            continue
        old = {(line["code"], line.get("for_period")): line for line in invoice.line_items}
        new = {(line["code"], line.get("for_period")): line for line in document["lines"]}
        for key in sorted(set(old) | set(new), key=str):
            before, after = old.get(key), new.get(key)
            if before != after:
                differences.append(
                    {
                        "tenant": document["tenant"],
                        "code": key[0],
                        "issued": before and {k: before[k] for k in ("quantity", "amount_cents")},
                        "rerun": after and {k: after[k] for k in ("quantity", "amount_cents")},
                    }
                )
        if not any(d["tenant"] == document["tenant"] for d in differences):
            differences.append(
                {
                    "tenant": document["tenant"],
                    "code": "inputs",
                    "issued": invoice.input_checksum,
                    "rerun": document["input_checksum"],
                }
            )
        if invoice.total_cents != document["total_cents"]:
            differences.append(
                {
                    "tenant": document["tenant"],
                    "code": "total_cents",
                    "issued": invoice.total_cents,
                    "rerun": document["total_cents"],
                }
            )
    return {"period": period, "checked": len(issued), "differences": differences}


def invoices_issue(period: str) -> int:
    """Issue the period's drafts as they stand (numbered, dated, taxed: tenants/billing/invoicing.py)."""
    from tenants.billing import invoicing

    return invoicing.drafts_issue(period)


# -- usage from other writers into the portal's table --------------------------------------------

_ROLLUP_UPSERT = """
INSERT INTO tenants_usage (tenant_id, minute, connection_seconds, messages_in, messages_out,
                           bytes_in, bytes_out, dropped, retained_count, stored_bytes,
                           message_units, connection_minutes, storage_byte_hours,
                           rules_triggered, actions_executed, sink_bytes)
SELECT t.id, %s, 0, 0, 0, 0, 0, '{}'::jsonb, 0, 0, 0, 0, 0, %s, %s, %s
  FROM tenants_tenant t WHERE t.slug = %s
ON CONFLICT (tenant_id, minute) DO UPDATE SET
  rules_triggered = tenants_usage.rules_triggered + EXCLUDED.rules_triggered,
  actions_executed = tenants_usage.actions_executed + EXCLUDED.actions_executed,
  sink_bytes = tenants_usage.sink_bytes + EXCLUDED.sink_bytes
"""
# What the rollup reads of a `rules-` segment; `sink_bytes` only where the segment has it (the
# live job's since bucket sinks were metered: older segments, and other writers', lack it).
_ROLLUP_COLUMNS = ("tenant", "minute", "rules_triggered", "actions_executed")
_DEVICE_ROLLUP_UPSERT = """
INSERT INTO tenants_deviceusage (tenant_id, device, day, message_units, connection_minutes,
                                 shadow_operations, rules_triggered, actions_executed)
SELECT t.id, %s, %s, 0, 0, 0, %s, %s FROM tenants_tenant t WHERE t.slug = %s
ON CONFLICT (tenant_id, device, day) DO UPDATE SET
  rules_triggered = tenants_deviceusage.rules_triggered + EXCLUDED.rules_triggered,
  actions_executed = tenants_deviceusage.actions_executed + EXCLUDED.actions_executed
"""
ROLLUP_WRITER_PREFIX = "rules-"
# Dead letters replayed from the API or the portal (`rules.services.rule_dead_letters_replay`): each
# webhook call is an action executed, as when the rules job makes it. A `rules-` writer, so the
# rollup below adds it to the charts like the job's own rows.
REPLAY_WRITER = "rules-replay"


def actions_replayed_record(
    tenant: str, calls: int, *, store: Any = None, now: Any = None
) -> str | None:
    """Meter `calls` replayed webhook calls of `tenant` as `actions_executed` in the usage log
    (the bill's source), in the minute they were made: one segment per replay, under a writer
    name of its own (rows are immutable; two replays never share a key). Returns its key."""
    import io
    import secrets
    from datetime import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from common.archive.schema import USAGE_SCHEMA, usage_segment_key
    from common.stores.object_store import open_object_store

    if calls <= 0:
        return None
    store = store or open_object_store()
    now = now or datetime.now(UTC)
    minute = now.replace(second=0, microsecond=0)
    row: dict[str, Any] = {name: 0 for name in USAGE_SCHEMA.names}
    row.update(tenant=tenant, minute=minute, writer=REPLAY_WRITER, actions_executed=calls)
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([row], schema=USAGE_SCHEMA), sink, compression="zstd")
    writer = f"{REPLAY_WRITER}.{secrets.token_hex(6)}"
    key = usage_segment_key(int(minute.timestamp() * 1000), writer, 0)
    store.put(key, sink.getvalue())
    return key


def usage_log_rollup(*, now: Any = None, store: Any = None) -> dict[str, int]:
    """Add the rules job's usage-log rows (writers `rules-…`: rule runs, actions and the bytes
    bucket sinks took) of today and yesterday to the `tenants_usage` minutes the broker fills,
    and its per-device rows (`device-usage/…`) to `tenants_deviceusage`'s days, each segment
    once, for the charts, the estimate and the per-device views (the bill itself always reads
    the log)."""
    import io
    from datetime import UTC, datetime, timedelta

    import pyarrow.parquet as pq
    from django.db import connection

    from common.archive.schema import DEVICE_USAGE_PREFIX, USAGE_PREFIX
    from common.stores.object_store import open_object_store
    from tenants.models import UsageLogImport

    store = store or open_object_store()
    now = now or datetime.now(UTC)
    keys = []
    for day in (now - timedelta(days=1), now):
        for key in store.list(f"{USAGE_PREFIX}/date={day:%Y-%m-%d}/"):
            if key.rsplit("/", 1)[-1].startswith(ROLLUP_WRITER_PREFIX) and key.endswith(".parquet"):
                keys.append(key)
    device_keys = []
    for day in (now - timedelta(days=1), now):
        for key in store.list(f"{DEVICE_USAGE_PREFIX}/date={day:%Y-%m-%d}/"):
            if key.endswith(".parquet"):
                device_keys.append(key)
    done = set(
        UsageLogImport.objects.filter(key__in=keys + device_keys).values_list("key", flat=True)
    )
    imported = rows = 0
    for key in sorted(set(device_keys) - done):
        count = _device_segment_import(store, key)
        imported += count is not None
        rows += count or 0
    for key in sorted(set(keys) - done):
        segment = pq.ParquetFile(io.BytesIO(store.get(key)))
        columns = [
            *_ROLLUP_COLUMNS,
            *(["sink_bytes"] if "sink_bytes" in segment.schema_arrow.names else []),
        ]
        table = segment.read(columns=columns)
        sums: dict[tuple[str, Any], list[int]] = {}
        for record in table.to_pylist():
            entry = sums.setdefault((record["tenant"], record["minute"]), [0, 0, 0])
            entry[0] += record["rules_triggered"]
            entry[1] += record["actions_executed"]
            entry[2] += record.get("sink_bytes") or 0
        with transaction.atomic():
            if not UsageLogImport.objects.filter(key=key).exists():
                with connection.cursor() as cursor:
                    cursor.executemany(
                        _ROLLUP_UPSERT,
                        [(minute, r, a, b, tenant) for (tenant, minute), (r, a, b) in sums.items()],
                    )
                UsageLogImport.objects.create(key=key)
                imported += 1
                rows += table.num_rows
    return {"segments": imported, "rows": rows}


def _device_segment_import(store: Any, key: str) -> int | None:
    """One device segment of the rules job into `tenants_deviceusage` (per UTC day), once:
    its rows' count, or None when another rollup took it first."""
    import io

    import pyarrow.parquet as pq
    from django.db import connection

    from tenants.models import UsageLogImport

    table = pq.read_table(
        io.BytesIO(store.get(key)),
        columns=["tenant", "device", "minute", "rules_triggered", "actions_executed"],
    )
    sums: dict[tuple[str, str, Any], list[int]] = {}
    for record in table.to_pylist():
        day = record["minute"].astimezone(UTC).date()
        entry = sums.setdefault((record["tenant"], record["device"], day), [0, 0])
        entry[0] += record["rules_triggered"]
        entry[1] += record["actions_executed"]
    with transaction.atomic():
        # The key's row is unique: of two rollups at once, the second fails on it and its
        # additions roll back with it, so a segment is added once.
        if UsageLogImport.objects.filter(key=key).exists():
            return None
        with connection.cursor() as cursor:
            cursor.executemany(
                _DEVICE_ROLLUP_UPSERT,
                [
                    (device, day, triggered, executed, tenant)
                    for (tenant, device, day), (triggered, executed) in sorted(sums.items())
                ],
            )
        UsageLogImport.objects.create(key=key)
    return table.num_rows
