"""The data rule outputs deliver to bucket sinks, metered in bytes (issue 47, point 4, as Kinesis
Data Firehose meters GB ingested): the usage log's `sink_bytes`, summed by the billing job into
the tenant's usage, rolled up into the usage minutes the portal and `GET /api/v1/usage` read,
and a billed dimension `sink_gb` (bytes / 10^9) that only a price book naming it prices
(`common.charges.pricing.BOOK_ONLY_DIMENSIONS`): no plan's book does until an operator prices
it, and a month priced without it keeps its invoice bytes, pinned by the SHA-256 the code gave
before the dimension existed."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq

from common.archive.schema import USAGE_SCHEMA, usage_segment_key
from common.charges.pricing import (
    adjustment_lines,
    build_invoice,
    canonical_json,
    sha256_hex,
    validate_price_book,
)
from common.stores.object_store import LocalObjectStore
from spark.rules.metering import SinkBytes, UsageWriter
from tests.api.conftest import acme, attacker  # noqa: F401 (fixtures)
from tests.billing.test_job import SMALL, lines_by_code
from tests.billing.test_job_execution_pricing import USAGE
from tests.billing.usage_rows import row, write_rows

SINKS_PRICED = {
    **SMALL,
    "dimensions": {
        **SMALL["dimensions"],
        "sink_gb": {"included": 1, "per": 1, "tiers": [{"up_to": None, "price": "0.029"}]},
    },
}
OLD_SCHEMA = pa.schema([f for f in USAGE_SCHEMA if f.name != "sink_bytes"])


def invoice(usage: dict, book: dict) -> dict:
    return build_invoice(
        tenant="alpha", period="2026-09", usage=usage, usage_digest="d" * 64, price_book=book
    )


def old_segment(store: LocalObjectStore, rows: list[dict], writer: str, at: datetime) -> str:
    """A segment as writers wrote them before the column existed: no `sink_bytes` at all."""
    table = pa.Table.from_pylist(
        [{k: v for k, v in r.items() if k != "sink_bytes"} for r in rows], schema=OLD_SCHEMA
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    key = usage_segment_key(int(at.timestamp() * 1000), writer, 1)
    store.put(key, sink.getvalue())
    return key


def test_a_month_priced_by_a_book_without_sink_gb_keeps_its_bytes():
    # The pins of the months before job executions and shadow operations were priced, now with
    # data delivered to bucket sinks in the log: a book that does not name them bills none.
    sinks = {**USAGE, "sink_bytes": 7_000_000_000}
    assert (
        sha256_hex(canonical_json(invoice(sinks, SMALL)))
        == "62b7cd1841b446b74b9441e5824f0e978a4c9fb9c130ba2ac68f565abf9bcaff"
    )
    # ...nor later, as late usage of an issued month.
    assert not adjustment_lines(
        period="2026-09", fresh_usage=sinks, billed_usage=USAGE, price_book=SMALL
    )
    # A book that names them bills nothing for a month without any: the same bytes.
    assert sha256_hex(
        canonical_json(invoice({**USAGE, "sink_bytes": 0}, SINKS_PRICED))
    ) == sha256_hex(canonical_json(invoice(USAGE, SINKS_PRICED)))


def test_a_book_that_names_sink_gb_prices_the_bytes_in_gb():
    validate_price_book(SINKS_PRICED["dimensions"], "USD", 0)
    document = invoice({**USAGE, "sink_bytes": 3_500_000_000}, SINKS_PRICED)
    line = lines_by_code(document)["sink_gb"]
    # 3.5 GB, 1 included: 2.5 × 0.029 = 0.0725 → 7 cents
    assert (line["quantity"], line["included"], line["billable"]) == (3.5, 1, 2.5)
    assert line["amount_cents"] == 7
    assert line["description"] == "Data delivered to bucket sinks (GB)"
    assert document["usage"]["sink_bytes"] == 3_500_000_000
    assert "list_prices" not in document["inputs"]
    # Exactly: a byte is 10^-9 GB, no rounding before the line's cent.
    odd = lines_by_code(invoice({**USAGE, "sink_bytes": 1_000_000_001}, SINKS_PRICED))["sink_gb"]
    assert odd["quantity"] == 1.000000001 and odd["billable"] == 1e-09
    [late] = adjustment_lines(
        period="2026-09",
        fresh_usage={**USAGE, "sink_bytes": 5_500_000_000},
        billed_usage={**USAGE, "sink_bytes": 3_500_000_000},
        price_book=SINKS_PRICED,
    )
    assert (late["dimension"], late["usage_delta"], late["quantity"]) == ("sink_gb", 2 * 10**9, 2)
    assert late["amount_cents"] == 13 - 7  # 4.5 billable GB is 0.1305 → 13 cents


def test_the_billing_job_sums_the_live_jobs_sink_bytes_into_the_tenants_usage(spark, tmp_path):
    """The live job's own metering (SinkBytes → its usage tally → the `rules-live` segment)
    through the billing job: the tenant's month sums them; a book without `sink_gb` bills as
    before; one naming it has the line and the figure. Rows written before the column existed
    keep their digest (the null column is no part of a row's hash), so an issued month still
    verifies."""
    from pyspark.sql import functions as F

    from spark.billing import job

    now = datetime.now(UTC)
    without, with_sinks = LocalObjectStore(tmp_path / "a"), LocalObjectStore(tmp_path / "b")
    for store in (without, with_sinks):
        write_rows(  # as a broker writes them: no sink bytes (null)
            store,
            [
                {k: v for k, v in row(t, now, messages=40).items() if k != "sink_bytes"}
                for t in ("alpha", "beta")
            ],
            "broker-a",
        )
        old_segment(store, [row("alpha", now, "rules-live", actions_executed=3)], "rules-old", now)
    meter = SinkBytes()
    meter.add("alpha", 2_500_000_000)
    meter.add("alpha", 1_000_000_000)
    writer = UsageWriter(with_sinks, "rules-live")
    tally = writer.new_tally()
    meter.drain_into(tally)
    key = writer.flush(tally)
    assert key is not None
    (written,) = pq.read_table(io.BytesIO(with_sinks.get(key))).to_pylist()
    period = written["minute"].strftime("%Y-%m")

    start, end = job.period_range(period)
    frame = job.read_usage(spark, job.usage_files(with_sinks, start, end))
    usage = job.collect_usage(job.usage_by_tenant_period(frame, start, end))
    assert usage[("alpha", period)]["sink_bytes"] == 3_500_000_000
    assert usage[("beta", period)]["sink_bytes"] == 0
    assert usage[("alpha", period)]["actions_executed"] == 3  # the older segment, read as before
    before = [c for c in USAGE_SCHEMA.names if c != "sink_bytes"]
    unmoved = frame.where(F.col("sink_bytes").isNull()).select(
        (F.xxhash64(*before) == F.xxhash64(*USAGE_SCHEMA.names)).alias("same")
    )
    assert [r.same for r in unmoved.collect()] == [True] * 3

    accounts = [job.Account("alpha", SMALL), job.Account("beta", SMALL)]
    plain = job.run(spark, without, period, accounts).invoices
    alpha, beta = job.run(spark, with_sinks, period, accounts).invoices
    assert canonical_json(beta) == canonical_json(plain[1])
    assert "sink" not in canonical_json(alpha).decode()
    assert (alpha["lines"], alpha["usage"]) == (plain[0]["lines"], plain[0]["usage"])
    (priced,) = job.run(spark, with_sinks, period, [job.Account("alpha", SINKS_PRICED)]).invoices
    assert priced["usage"]["sink_bytes"] == 3_500_000_000
    line = lines_by_code(priced)["sink_gb"]
    assert (line["quantity"], line["amount_cents"]) == (3.5, 7)
    assert priced["total_cents"] == alpha["total_cents"] + 7


def rolled_up(store: LocalObjectStore) -> datetime:
    """The live job's rules segment with the bytes S3 sinks took for acme (1.5 MB), beside one
    from before the column, rolled up into the usage minutes; returns the minute."""
    from tenants.billing import services as billing

    now = datetime.now(UTC).replace(second=0, microsecond=0)
    old_segment(store, [row("acme", now, "rules-live", actions_executed=3)], "rules-live.0", now)
    meter = SinkBytes()
    meter.add("acme", 1_500_000)
    meter.add("ghost", 99)  # no such tenant: nobody's
    writer = UsageWriter(store, "rules-live")
    tally = writer.new_tally()
    meter.drain_into(tally)
    assert writer.flush(tally) is not None
    assert billing.usage_log_rollup(now=now, store=store)["segments"] == 2
    return now


def test_the_rules_jobs_sink_bytes_reach_the_usage_minutes_and_the_usage_api(
    acme,  # noqa: F811
    attacker,  # noqa: F811
    tmp_path,
):
    from tenants.billing import services as billing
    from tenants.models import Usage

    tenant, api = acme
    store = LocalObjectStore(tmp_path)
    now = rolled_up(store)
    assert billing.usage_log_rollup(now=now, store=store)["segments"] == 0  # each once
    minutes = Usage.objects.filter(tenant=tenant)
    assert sum(m.sink_bytes for m in minutes) == 1_500_000
    assert sum(m.actions_executed for m in minutes) == 3  # the older segment, read as before

    day = now.date()
    query = f"from={day.isoformat()}&to={(day + timedelta(days=1)).isoformat()}&granularity=day"
    (point,) = api.get(f"/api/v1/usage?{query}").json()["series"]
    assert (point["sink_bytes"], point["sink_gb"]) == (1_500_000, 0.0015)
    since = (now - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    raw = api.get("/api/v1/usage", {"since": since}).json()["results"]
    assert sum(m["sink_bytes"] for m in raw) == 1_500_000
    _, evil = attacker
    (theirs,) = evil.get(f"/api/v1/usage?{query}").json()["series"]
    assert theirs["sink_bytes"] == 0


def test_bucket_sinks_data_is_forecast_and_charted_unpriced_until_a_book_prices_it(
    acme,  # noqa: F811
    client,
    tmp_path,
):
    from tenants.billing import services as billing

    tenant, api = acme
    now = rolled_up(LocalObjectStore(tmp_path))
    # Shown, not billed: the plan's book does not name them.
    ahead = {d["dimension"]: d for d in api.get("/api/v1/usage/forecast").json()["dimensions"]}
    sinks = ahead["sink_gb"]
    assert sinks["month_to_date"] == 0.0015 and sinks["priced"] is False
    assert sinks["description"] == "Data delivered to bucket sinks (GB)"
    assert sinks["month_to_date_cents"] == 0
    client.login(username="owner@acme.io", password="pass-w0rd-acme")
    page = client.get(f"/usage/?period={now:%Y-%m}").content.decode()
    assert 'data-chart="sink_gb"' in page and 'id="chart-sink_gb"' in page
    assert '<tr data-dimension="sink_gb"><td>Data delivered to bucket sinks (GB)</td>' in page
    assert "<th>Delivered to bucket sinks (GB)</th>" in page and "<td>0.001500</td>" in page

    # An operator prices them: the plan's next book names `sink_gb`, the forecast prices them.
    current = billing.price_book_for(tenant.plan, f"{now:%Y-%m}")
    billing.price_book_set(
        tenant.plan,
        effective_from=date(now.year, now.month, 1),
        base_fee_cents=current.base_fee_cents,
        dimensions={
            **current.dimensions,
            "sink_gb": {"included": 0, "per": 1, "tiers": [{"up_to": None, "price": "10.00"}]},
        },
    )
    ahead = {d["dimension"]: d for d in api.get("/api/v1/usage/forecast").json()["dimensions"]}
    sinks = ahead["sink_gb"]
    assert sinks["priced"] is True and sinks["unit_price"] == "10.00"
    assert sinks["month_to_date_cents"] == 2  # 0.0015 GB × 10.00 = 1.5 cents, half up
