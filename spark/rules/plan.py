"""The rule plan: archive rows → one row per (rule, row its FROM took), as pure DataFrame functions.

Scoping is decided here and only here, from the rule's stored tenant and its compiled FROM — never
from the rule's text as Spark sees it: the SQL is never handed to Spark. Spark only gets literal
predicates built from the compiled topic filters (pushed down to the Parquet scan) and one
`mapInArrow` that evaluates each row with `CompiledRule.apply`, the same code the dry run uses, so
the jobs and the dry run share one semantics. Inside the evaluator a row reaches a rule only when
the row's tenant is the rule's tenant (checked again, not just pushed down), the rule's FROM reads
it, and it is not the rule's own republished output. An exception evaluating one row for one rule
makes that (rule, row) `failed` and goes on with the next.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from common.archive_schema import EVENT_PUBLISH, MESSAGE_UNIT_BYTES
from spark.rules.prefilter import VARIANT_COLUMN, Stage, skipped_condition

log = logging.getLogger(__name__)
PASSED, SKIPPED, FAILED = "passed", "skipped", "failed"

RESULT_SCHEMA = pa.schema(
    [
        pa.field("rule_id", pa.int64(), nullable=False),
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),  # Spark's unit
        pa.field("units", pa.int32(), nullable=False),  # 5 KiB message units, for metering
        pa.field("status", pa.string(), nullable=False),  # passed | skipped | failed
        pa.field("outputs", pa.string()),  # JSON list of output objects when passed
        pa.field("error", pa.string()),
    ]
)
RESULT_DDL = (
    "rule_id long, tenant string, ts timestamp, units int, status string, "
    "outputs string, error string"
)
RULES_CLIENT_PREFIX = "$rules-"
# Above this many rules one OR of per-rule predicates costs Catalyst more than it saves the scan.
PUSHDOWN_LIMIT = 64


@dataclass(frozen=True)
class RuleSpec:
    """A stored rule as the jobs run it: identity and scope come from the database row."""

    id: int
    tenant: str
    name: str
    sql: str
    actions: tuple[dict, ...] = field(default=(), compare=False)

    @property
    def client_prefix(self) -> str:
        """Client ids of this rule's republish connections (`$rules-{id}-…`)."""
        return f"{RULES_CLIENT_PREFIX}{self.id}-"


def compile_specs(specs: Iterable[RuleSpec]) -> tuple[list[RuleSpec], dict[int, str]]:
    """The specs that compile, and the compile error of each that does not."""
    from common.rules import compile_rule

    good, errors = [], {}
    for spec in specs:
        try:
            compile_rule(spec.sql)
        except Exception as exc:  # RuleSyntaxError, or anything the dialect raises
            errors[spec.id] = f"compile: {exc}"
        else:
            good.append(spec)
    return good, errors


# -- push-down: literal predicates from the compiled FROM ------------------------------------------


def filter_predicate(topic_filter: str) -> Column | None:
    """A superset predicate on `topic` for one MQTT filter (None: no restriction on topic)."""
    levels = topic_filter.split("/")
    fixed = []
    for level in levels:
        if level in ("+", "#"):
            break
        fixed.append(level)
    if len(fixed) == len(levels):
        return F.col("topic") == F.lit(topic_filter)
    prefix = "/".join(fixed)
    if not fixed:
        return None
    if levels[len(fixed)] == "#":  # `a/#` also matches `a`
        return (F.col("topic") == F.lit(prefix)) | F.col("topic").startswith(F.lit(prefix + "/"))
    return F.col("topic").startswith(F.lit(prefix + "/"))


def from_predicate(compiled: Any) -> Column:
    """What the rule's FROM can read, as a Spark predicate (a superset; the evaluator decides)."""
    events = set(getattr(compiled, "events", ()) or ())
    filters = list(getattr(compiled, "topic_filters", ()) or ())
    parts: list[Column] = []
    if filters:
        topic_preds = [filter_predicate(f) for f in filters]
        publish = F.col("event") == F.lit(EVENT_PUBLISH)
        if all(p is not None for p in topic_preds):
            combined = topic_preds[0]
            for p in topic_preds[1:]:
                combined = combined | p
            publish = publish & combined
        parts.append(publish)
    lifecycle = sorted(e for e in events if e != EVENT_PUBLISH)
    if lifecycle:
        parts.append(F.col("event").isin(lifecycle))
    if EVENT_PUBLISH in events and not filters:
        parts.append(F.col("event") == F.lit(EVENT_PUBLISH))
    if not parts:
        return F.lit(False)
    out = parts[0]
    for p in parts[1:]:
        out = out | p
    return out


def scope_predicate(specs: Sequence[RuleSpec]) -> Column:
    """Rows any of the rules may read: each rule's tenant AND its FROM."""
    from common.rules import compile_rule

    tenants = sorted({s.tenant for s in specs})
    scope = F.col("tenant").isin(tenants)
    if len(specs) > PUSHDOWN_LIMIT:
        return scope
    per_rule = None
    for spec in specs:
        pred = (F.col("tenant") == F.lit(spec.tenant)) & from_predicate(compile_rule(spec.sql))
        per_rule = pred if per_rule is None else per_rule | pred
    return scope & per_rule


# -- evaluation --------------------------------------------------------------------------------


def rule_outputs(df: DataFrame, specs: Sequence[RuleSpec]) -> DataFrame:
    """Archive rows → RESULT_SCHEMA rows: one per (rule, row whose tenant and FROM it reads)."""
    specs = list(specs)
    if not specs:
        return df.sparkSession.createDataFrame([], RESULT_DDL)
    shipped = [(s.id, s.tenant, s.sql, s.client_prefix) for s in specs]

    def evaluate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        evaluator = Evaluator(shipped)
        for batch in batches:
            for out in evaluator.batches(batch):
                if out.num_rows:
                    yield out

    # Only the columns some rule reads become Python objects (and are read from Parquet).
    needed = set(_EVALUATOR_COLUMNS)
    for spec in specs:
        needed.update(_compiled(spec.sql).archive_columns)
    columns = [name for name in df.columns if name in needed]
    # Each row's units natively, first: they read the property columns, which the rules may
    # not need (so they are neither shipped to Python nor carried through the prefilter).
    scoped = df.where(scope_predicate(specs)).select(*columns, native_units().alias(UNITS_COLUMN))
    stage = Stage()
    skips = native_skips(specs, stage) if len(specs) <= PUSHDOWN_LIMIT else {}
    if not skips:
        return scoped.mapInArrow(evaluate, RESULT_DDL)
    carried = [*columns, UNITS_COLUMN]
    # The native prefilter (spark/rules/prefilter.py), in projections so that each costly piece
    # runs once per row: the payload parsed, the variant at each path, every leaf of every
    # rule's WHERE, then per row the rules that surely skip it (`_skip`), its units, and whether
    # any rule still needs the Python evaluator (`_need`; only then are the row's columns other
    # than tenant and ts sent to Python). No filter on these columns: Catalyst would push it
    # below the projections and repeat their work. The Python worker turns `_skip` into
    # `skipped` results (counted and metered as before) and evaluates only the `_need` rows,
    # leaving out the rules that skip them.
    parsed = scoped.select(*carried, Stage.parsed())
    values = parsed.select(
        *carried, F.col(VARIANT_COLUMN), *[e.alias(n) for n, e in stage.values.items()]
    )
    leaves = values.select(*carried, *[expr.alias(name) for name, expr in stage.leaves.items()])
    skip_ids = F.filter(
        F.array(*[F.when(cond, F.lit(rule_id)) for rule_id, cond in skips.items()]),
        lambda x: x.isNotNull(),
    ).cast("array<long>")
    marked = leaves.select(*carried, skip_ids.alias(SKIP_COLUMN))
    need = None
    for spec in specs:
        pred = (F.col("tenant") == F.lit(spec.tenant)) & from_predicate(_compiled(spec.sql))
        if spec.id in skips:
            pred = pred & ~F.array_contains(F.col(SKIP_COLUMN), F.lit(spec.id))
        need = pred if need is None else need | pred
    need = F.coalesce(need, F.lit(False))
    sent = marked.select(
        *[F.col(c) if c in ("tenant", "ts") else F.when(need, F.col(c)).alias(c) for c in columns],
        SKIP_COLUMN,
        UNITS_COLUMN,
        need.alias(NEED_COLUMN),
    )
    return sent.mapInArrow(evaluate, RESULT_DDL)


SKIP_COLUMN = "_skip"  # the rules that surely skip the row (prefilter)
UNITS_COLUMN = "_units"  # its units, computed natively (its payload may not be sent)
NEED_COLUMN = "_need"  # some rule still needs the evaluator for it
_HELPER_COLUMNS = (SKIP_COLUMN, UNITS_COLUMN, NEED_COLUMN)


def native_skips(specs: Sequence[RuleSpec], stage: Stage) -> dict[int, Column]:
    """Per prefiltered rule: the rows of its tenant it surely skips."""
    out = {}
    for spec in specs:
        try:
            condition = skipped_condition(spec.sql, spec.client_prefix, stage)
        except Exception:  # not prefiltered: the evaluator decides every row, as before
            log.warning("rule %s: no native prefilter", spec.id, exc_info=True)
            condition = None
        if condition is not None:
            out[spec.id] = (F.col("tenant") == F.lit(spec.tenant)) & condition
    return out


# The MQTT 5 encoding of each archived publish property (identifier byte, then the value: a
# byte, a four-byte integer, or a string / binary with its two-byte length), as the broker meters
# it (`data_plane.broker.message.metered_size`): a rule evaluation is sized like every other
# message unit, payload + topic (UTF-8) + properties.
_FIXED_PROPERTIES = {"payload_format": 1 + 1, "message_expiry": 1 + 4}
_LENGTH_PROPERTIES = ("content_type", "response_topic", "correlation_data")  # 1 + 2 + length
_USER_PROPERTY_OVERHEAD = 1 + 2 + 2  # identifier, key length, value length


def native_units() -> Column:
    """`_units` in Spark: 5 KiB units of payload + topic + properties bytes, at least one."""
    size = F.coalesce(F.octet_length("payload"), F.lit(0)) + F.coalesce(
        F.octet_length("topic"), F.lit(0)
    )
    for name, width in _FIXED_PROPERTIES.items():
        size = size + F.when(F.col(name).isNotNull(), F.lit(width)).otherwise(F.lit(0))
    for name in _LENGTH_PROPERTIES:
        size = size + F.coalesce(F.octet_length(name) + F.lit(3), F.lit(0))
    pairs = F.aggregate(
        F.col("user_properties"),
        F.lit(0),
        lambda acc, p: (
            acc
            + F.lit(_USER_PROPERTY_OVERHEAD)
            + F.coalesce(F.octet_length(p["key"]), F.lit(0))
            + F.coalesce(F.octet_length(p["value"]), F.lit(0))
        ),
    )
    size = size + F.coalesce(pairs, F.lit(0))
    return F.greatest(F.ceil(size / F.lit(MESSAGE_UNIT_BYTES)), F.lit(1)).cast("int")


# What the evaluator itself reads of every row: scope, self-trigger check, result, units.
_EVALUATOR_COLUMNS = ("event", "tenant", "ts", "topic", "client_id", "payload")


_COMPILED: dict[str, Any] = {}  # per Python worker: compile each SQL once


def _compiled(sql: str) -> Any:
    rule = _COMPILED.get(sql)
    if rule is None:
        from common.rules import compile_rule

        rule = _COMPILED[sql] = compile_rule(sql)
    return rule


class Evaluator:
    """Runs in the Python workers: rows of one Arrow batch through the tenants' compiled rules."""

    def __init__(self, shipped: Sequence[tuple[int, str, str, str]]) -> None:
        self.by_tenant: dict[str, list[tuple[int, Any, str]]] = {}
        for rule_id, tenant, sql, prefix in shipped:
            self.by_tenant.setdefault(tenant, []).append((rule_id, _compiled(sql), prefix))

    def batches(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Results of one input batch: the prefilter's `skipped` answers (vectorised) and the
        evaluated rows that still need a rule's evaluation."""
        batch = batch.filter(pc.is_in(batch.column("tenant"), pa.array(list(self.by_tenant))))
        names = batch.schema.names
        if SKIP_COLUMN not in names:
            yield self.batch(batch)
            return
        skip = batch.column(SKIP_COLUMN)
        parents = pc.list_parent_indices(skip)
        if len(parents):
            yield pa.RecordBatch.from_arrays(
                [
                    pc.list_flatten(skip).cast(pa.int64()),
                    batch.column("tenant").take(parents).cast(pa.string()),
                    batch.column("ts").take(parents).cast(RESULT_SCHEMA.field("ts").type),
                    batch.column(UNITS_COLUMN).take(parents).cast(pa.int32()),
                    pa.nulls(len(parents), pa.string()).fill_null(SKIPPED),
                    pa.nulls(len(parents), pa.string()),
                    pa.nulls(len(parents), pa.string()),
                ],
                schema=RESULT_SCHEMA,
            )
        needed = batch.filter(pc.fill_null(batch.column(NEED_COLUMN), False))
        if needed.num_rows:
            yield self.batch(needed)

    def batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        # Rows of tenants without rules never become Python objects (and never reach a rule).
        batch = batch.filter(pc.is_in(batch.column("tenant"), pa.array(list(self.by_tenant))))
        units = batch.column(UNITS_COLUMN) if UNITS_COLUMN in batch.schema.names else None
        if units is not None:
            batch = batch.drop_columns(
                [c for c in (UNITS_COLUMN, NEED_COLUMN) if c in batch.schema.names]
            )
        rule_ids: list[int] = []
        taken: list[int] = []  # the batch row of each result
        statuses: list[str] = []
        outputs: list[str | None] = []
        errors: list[str | None] = []
        for index, row in enumerate(_rows(batch)):
            rules = self.by_tenant.get(row["tenant"])
            if not rules:
                continue
            client_id = row["client_id"] or ""
            skipped = row.pop(SKIP_COLUMN, None) or ()  # answered natively (prefilter)
            for rule_id, compiled, prefix in rules:
                if client_id.startswith(prefix):
                    continue  # the rule's own republished output never re-triggers it
                if rule_id in skipped:
                    continue
                try:
                    if not compiled.reads(row["event"], row["topic"]):
                        continue
                except Exception:
                    continue
                status, output, error = _apply(compiled, row)
                rule_ids.append(rule_id)
                taken.append(index)
                statuses.append(status)
                outputs.append(output)
                errors.append(error)
        indices = pa.array(taken, pa.int64())
        return pa.RecordBatch.from_arrays(
            [
                pa.array(rule_ids, pa.int64()),
                batch.column("tenant").take(indices).cast(pa.string()),
                batch.column("ts").take(indices).cast(RESULT_SCHEMA.field("ts").type),
                (_units(batch) if units is None else units.cast(pa.int32())).take(indices),
                pa.array(statuses, pa.string()),
                pa.array(outputs, pa.string()),
                pa.array(errors, pa.string()),
            ],
            schema=RESULT_SCHEMA,
        )


def _rows(batch: pa.RecordBatch) -> list[dict]:
    """The batch as archive rows, column by column (cheaper than `to_pylist`): `ts` as integer
    milliseconds (which the dialect takes as is) rather than a datetime per row."""
    names = batch.schema.names
    columns = []
    for name in names:
        column = batch.column(name)
        if name == "ts":
            column = pc.cast(column, pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        columns.append(column.to_pylist())
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _apply(compiled: Any, row: dict) -> tuple[str, str | None, str | None]:
    try:
        result = compiled.apply(row)
    except Exception as exc:  # the dialect should return errors, but a raise is a failure too
        return FAILED, None, f"{type(exc).__name__}: {exc}"[:500]
    if result.error:
        return FAILED, None, str(result.error)[:500]
    if not result.matched:
        return SKIPPED, None, None
    try:
        return PASSED, json.dumps(result.outputs, default=_json_default), None
    except Exception as exc:
        return FAILED, None, f"output not JSON: {exc}"[:500]


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _units(batch: pa.RecordBatch) -> pa.Array:
    """Each row's billable 5 KiB units (`message_units` of payload + topic + properties bytes,
    as `native_units`), vectorized; property columns the batch lacks count as absent."""
    names = set(batch.schema.names)

    def length(name: str) -> pa.Array:
        return pc.fill_null(pc.binary_length(batch.column(name).cast(pa.binary())), 0).cast(
            pa.int64()
        )

    size = pc.add(length("payload"), length("topic"))
    for name, width in _FIXED_PROPERTIES.items():
        if name in names:
            present = pc.is_valid(batch.column(name))
            size = pc.add(size, pc.if_else(present, width, 0).cast(pa.int64()))
    for name in _LENGTH_PROPERTIES:
        if name in names:
            present = pc.is_valid(batch.column(name))
            size = pc.add(size, pc.if_else(present, pc.add(length(name), 3), 0))
    if "user_properties" in names:
        pairs = batch.column("user_properties")
        flat = pc.list_flatten(pairs)
        if len(flat):
            each = pc.add(
                pc.add(
                    pc.fill_null(
                        pc.binary_length(pc.struct_field(flat, "key").cast(pa.binary())), 0
                    ),
                    pc.fill_null(
                        pc.binary_length(pc.struct_field(flat, "value").cast(pa.binary())), 0
                    ),
                ),
                _USER_PROPERTY_OVERHEAD,
            ).cast(pa.int64())
            per_row = np.bincount(
                pc.list_parent_indices(pairs).to_numpy(),
                weights=each.to_numpy(),
                minlength=batch.num_rows,
            )
            size = pc.add(size, pa.array(per_row.astype(np.int64)))
    units = pc.divide(pc.add(size, MESSAGE_UNIT_BYTES - 1), MESSAGE_UNIT_BYTES)
    return pc.max_element_wise(units, 1).cast(pa.int32())


# -- summaries ---------------------------------------------------------------------------------


def rule_counts(results: DataFrame) -> DataFrame:
    """Per rule: matched (the FROM took the row), passed, failed, units, newest ts, last error."""
    return results.groupBy("rule_id", "tenant").agg(
        F.count(F.lit(1)).alias("matched"),
        F.sum(F.when(F.col("status") == PASSED, 1).otherwise(0)).alias("passed"),
        F.sum(F.when(F.col("status") == FAILED, 1).otherwise(0)).alias("failed"),
        F.max(F.when(F.col("status") == FAILED, F.col("error"))).alias("last_error"),
        F.sum("units").cast("long").alias("units"),
        F.max("ts").alias("max_ts"),
    )
