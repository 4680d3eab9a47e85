"""The billing job: the usage log + price books → one invoice document per tenant for a period.

Shape: `usage_files` and `read_usage` (or, on S3 with the executors outside the driver's JVM,
`usage_keys` and `read_usage_objects`) are the input edge (object store → DataFrame);
`usage_by_tenant_period` is the one Spark transform (sum every billed column per tenant and
calendar month, with a digest of the rows summed); `bill` is plain Python over those few sums
(tenants × months) that prices them with `common.charges.pricing`. The caller stores the documents.

Late usage: the job also re-sums the months of the tenant's recently issued invoices
(`Account.issued`); where the log now holds more (or less) than was billed, the difference
becomes `adjustment` lines on this period's invoice, priced with that month's price book — an
issued invoice is never changed.

Reproducible: the same log and price books give the same documents byte for byte
(`common.charges.pricing.canonical_json`); each keeps the digest of the usage rows it summed, the
checksum of its price book and of its adjustments (`inputs`, `input_checksum`).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from common.archive.schema import USAGE_PREFIX, USAGE_SCHEMA
from common.charges.pricing import USAGE_COLUMN, adjustment_lines, build_invoice
from common.stores.object_store import ObjectStore
from spark import object_source
from spark.session import in_process

SUMMED = tuple(sorted(set(USAGE_COLUMN.values())))

SPARK_USAGE_SCHEMA = T.StructType(
    [
        T.StructField(
            f.name,
            T.StringType()
            if f.name in ("tenant", "writer")
            else T.TimestampType()
            if f.name == "minute"
            else T.LongType(),
            nullable=f.nullable,
        )
        for f in USAGE_SCHEMA
    ]
)


@dataclass(frozen=True)
class IssuedPeriod:
    """What was billed for an earlier month: its price book and the usage sums billed so far
    (the issued invoice's, plus the deltas of adjustment lines issued since)."""

    period: str
    price_book: dict[str, Any]
    billed_usage: dict[str, int]


@dataclass(frozen=True)
class Account:
    tenant: str
    price_book: dict[str, Any]  # the version in force for the billed period
    issued: tuple[IssuedPeriod, ...] = ()
    credits: tuple[dict[str, Any], ...] = ()  # {"amount_cents", "reason"} for this period
    # Prorated base fee: one term per plan held when the tenant started or changed plan during
    # the period (common.charges.pricing.prorated_base_fee_line); empty: the full monthly fee.
    terms: tuple[dict[str, Any], ...] = ()


@dataclass
class BillingResult:
    period: str
    invoices: list[dict[str, Any]]
    files: int
    rows: int
    revenue: dict[str, Any] = field(default_factory=dict)


# -- periods -------------------------------------------------------------------------------------


def period_range(period: str) -> tuple[datetime, datetime]:
    """`YYYY-MM` → [first instant, first instant of the next month), UTC."""
    try:
        start = datetime.strptime(period, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"period {period!r}: use YYYY-MM, e.g. 2026-10") from None
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def days(start: datetime, end: datetime) -> list[date]:
    out, day = [], start.date()
    while day < end.date():
        out.append(day)
        day += timedelta(days=1)
    return out


# -- input edge ----------------------------------------------------------------------------------


def usage_keys(store: ObjectStore, start: datetime, end: datetime) -> list[str]:
    """The usage log's objects of the days in [start, end)."""
    keys = []
    for day in days(start, end):
        keys += [
            k
            for k in store.list(f"{USAGE_PREFIX}/date={day.isoformat()}/")
            if k.endswith(".parquet")
        ]
    return sorted(keys)


def usage_files(
    store: ObjectStore, start: datetime, end: datetime, scratch: Path | None = None
) -> list[str]:
    """Paths Spark can read for the usage log's days in [start, end): the files themselves for a
    local store; for S3 (no S3 connector in the pyspark wheel) copies in `scratch`, which only
    executors in the driver's JVM (`local[…]`) may read: on a cluster see `read_usage_objects`."""
    keys = usage_keys(store, start, end)
    root = getattr(store, "root", None)
    if root is not None:
        return [str(Path(root) / key) for key in keys]
    scratch = scratch or Path(tempfile.mkdtemp(prefix="usage-"))
    paths = []
    for key in keys:
        path = scratch / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get(key))
        paths.append(str(path))
    return paths


# Read settings of the billing scan, in a session of its own (`SparkSession.newSession`: same
# SparkContext, its own SQL conf), so they change nothing for the rules jobs or the caller.
READ_CONF = {
    # The paths are files `usage_files` already listed: Spark lists them again, and above 32
    # paths it does so in a Spark job of one task per path (720 tasks for a month's hourly
    # segments, ~3 s of a warm 2-core run); in the driver it takes a fraction of a second.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    # Larger vectorised batches: fewer batch and column-vector set-ups per file (the default
    # is 4,096 rows; a segment holds a writer's hour: tens of thousands).
    "spark.sql.parquet.columnarReaderBatchSize": "16384",
    # The minute range is still filtered (below), only not pushed into the Parquet reader: a
    # segment's rows are all of its folder's hour, so row-group statistics prune nothing, and
    # the pushed predicate is Java-serialised into every file's reader configuration.
    "spark.sql.parquet.filterPushdown": "false",
}


def read_usage_objects(spark: SparkSession, store: ObjectStore, keys: list[str]) -> DataFrame:
    """The usage log's objects at `keys`, read by the executors from the object store itself
    (`spark.object_source`, boto3 for `s3://`): what the job reads of an S3 store when its
    executors run outside the driver's JVM (a cluster, `local-cluster[…]`), which could not read
    a copy on the driver's disk."""
    if not keys:
        return spark.createDataFrame([], SPARK_USAGE_SCHEMA)
    object_source.register(spark)
    return (
        spark.read.format(object_source.NAME)
        .schema(SPARK_USAGE_SCHEMA)
        .options(**object_source.store_options(store))
        .option("keys", json.dumps(keys))
        .load()
    )


def read_usage(spark: SparkSession, paths: list[str]) -> DataFrame:
    session = spark.newSession()
    for key, value in READ_CONF.items():
        session.conf.set(key, value)
    if not paths:
        return session.createDataFrame([], SPARK_USAGE_SCHEMA)
    return session.read.schema(SPARK_USAGE_SCHEMA).parquet(*paths)


# -- the transform -------------------------------------------------------------------------------


def months(start: datetime, end: datetime) -> list[tuple[str, datetime]]:
    """(`YYYY-MM`, first instant of the next month) for each calendar month in [start, end)."""
    out, at = [], start
    while at < end:
        following = (at.replace(day=1) + timedelta(days=32)).replace(day=1)
        out.append((at.strftime("%Y-%m"), following))
        at = following
    return out


# Up to this many tenants (a `--tenant` report, a verification) their rows are selected before
# hashing and summing; for more, every tenant is summed and `collect_usage` keeps the wanted
# groups: each segment holds all tenants, so the scan decodes their rows anyway, and a filter of
# a thousand names is a set look-up per row.
ROW_FILTER_TENANTS = 10


def usage_by_tenant_period(
    usage: DataFrame, start: datetime, end: datetime, tenants: Iterable[str] | None = None
) -> DataFrame:
    """Per tenant and calendar month in [start, end): the sum of every billed column, the number
    of rows and an order-independent digest of them (the sum of each row's 64-bit hash). With
    `tenants`, the groups of at least those tenants (pass the same to `collect_usage`)."""
    rows = usage.where((F.col("minute") >= F.lit(start)) & (F.col("minute") < F.lit(end)))
    if tenants is not None and len(wanted := sorted(set(tenants))) <= ROW_FILTER_TENANTS:
        rows = rows.where(F.col("tenant").isin(wanted))
    # The month as a chain of timestamp comparisons against the known month boundaries (a
    # literal string per month), rather than a `yyyy-MM` string formatted for every row.
    period = None
    for name, following in months(start, end):
        period = (F.when if period is None else period.when)(
            F.col("minute") < F.lit(following), F.lit(name)
        )
    row_hash = F.xxhash64(*[F.col(name) for name in USAGE_SCHEMA.names])
    # The 64-bit hash summed as two 32-bit halves in longs: exact (no overflow below 2^31 rows a
    # group) and much cheaper than a decimal sum.
    low = F.col("_hash").bitwiseAND(F.lit(0xFFFFFFFF))
    return (
        rows.withColumn("_hash", row_hash)
        .groupBy("tenant", period.alias("period"))
        .agg(
            *[F.sum(column).cast("long").alias(column) for column in SUMMED],
            F.count(F.lit(1)).alias("rows"),
            F.concat_ws(
                ":",
                F.sum(F.shiftrightunsigned(F.col("_hash"), 32)).cast("string"),
                F.sum(low).cast("string"),
            ).alias("row_hash_sum"),
        )
    )


def collect_usage(
    sums: DataFrame, tenants: Iterable[str] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """The sums as plain values, for `tenants` only (all when None)."""
    wanted = None if tenants is None else set(tenants)
    out = {}
    for row in sums.collect():
        values = row.asDict()
        if wanted is not None and values["tenant"] not in wanted:
            continue
        digest = hashlib.sha256(f"{values['rows']}:{values['row_hash_sum']}".encode())
        out[(values["tenant"], values["period"])] = {
            **{c: int(values[c] or 0) for c in SUMMED},
            "rows": int(values["rows"]),
            "digest": digest.hexdigest(),
        }
    return out


# -- pricing (plain Python over the sums) --------------------------------------------------------

EMPTY_DIGEST = hashlib.sha256(b"0:0").hexdigest()


def bill(
    period: str, accounts: list[Account], usage: dict[tuple[str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """One invoice document per account, tenants in slug order."""
    invoices = []
    for account in sorted(accounts, key=lambda a: a.tenant):
        current = usage.get((account.tenant, period), {})
        adjustments = []
        for issued in sorted(account.issued, key=lambda i: i.period):
            fresh = usage.get((account.tenant, issued.period), {})
            adjustments += adjustment_lines(
                period=issued.period,
                fresh_usage=fresh,
                billed_usage=issued.billed_usage,
                price_book=issued.price_book,
            )
        invoices.append(
            build_invoice(
                tenant=account.tenant,
                period=period,
                usage={c: current.get(c, 0) for c in SUMMED},
                usage_digest=current.get("digest", EMPTY_DIGEST),
                price_book=account.price_book,
                adjustments=adjustments,
                credits=list(account.credits),
                terms=list(account.terms),
            )
        )
    return invoices


def revenue_summary(period: str, invoices: list[dict[str, Any]]) -> dict[str, Any]:
    by_currency: dict[str, int] = {}
    for invoice in invoices:
        by_currency[invoice["currency"]] = (
            by_currency.get(invoice["currency"], 0) + invoice["total_cents"]
        )
    return {
        "period": period,
        "tenants": len(invoices),
        "billed_tenants": sum(1 for i in invoices if i["total_cents"] > 0),
        "total_cents": by_currency,
    }


def run(
    spark: SparkSession,
    store: ObjectStore,
    period: str,
    accounts: list[Account],
    progress: Callable[[str], None] = lambda step: None,
) -> BillingResult:
    """Bill `period` for `accounts`: read the log (the period and the issued months it may
    adjust), sum it in Spark, price it."""
    start, end = period_range(period)
    earliest = min([start] + [period_range(i.period)[0] for a in accounts for i in a.issued])
    progress("listing usage log")
    if getattr(store, "root", None) is None and not in_process(spark.sparkContext.master):
        # S3 with the executors outside this JVM: they read the objects from the store
        paths = usage_keys(store, earliest, end)
        frame = read_usage_objects(spark, store, paths)
    else:
        paths = usage_files(store, earliest, end)
        frame = read_usage(spark, paths)
    progress(f"summing {len(paths)} usage segments")
    tenants = [a.tenant for a in accounts]
    sums = usage_by_tenant_period(frame, earliest, end, tenants)
    usage = collect_usage(sums, tenants)
    progress("pricing")
    invoices = bill(period, accounts, usage)
    rows = sum(v["rows"] for (t, p), v in usage.items() if p == period)
    return BillingResult(period, invoices, len(paths), rows, revenue_summary(period, invoices))
