"""The rule plan: archive rows → one row per (rule, row its FROM took), as pure DataFrame functions.

Scoping is decided here and only here, from the rule's stored tenant and its compiled FROM — never
from the rule's text as Spark sees it: the SQL is never handed to Spark. Spark gets literal
predicates built from the compiled topic filters (pushed down to the Parquet scan), then the
native columns `spark.rules.native` builds from each rule's AST (whole rules answered in Spark
where their answer is exact, per row), and one `mapInArrow` that evaluates the rest with
`CompiledRule.apply`, the same code the dry run uses, so the jobs and the dry run share one
semantics. A row reaches a rule only when the row's tenant is the rule's tenant (in the native
status and checked again in the evaluator, not just pushed down), the rule's FROM reads it, and
it is not the rule's own republished output. An exception evaluating one row for one rule makes
that (rule, row) `failed` and goes on with the next.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.classic.column import _to_java_column

from common.archive.schema import EVENT_PUBLISH, MESSAGE_ID, MESSAGE_UNIT_BYTES
from common.archive.shredding import PAYLOAD_FIELDS, typed_field_path
from spark.rules.native import (
    PAYLOAD_OK,
    VARIANT_COLUMN,
    NativeRule,
    NotNative,
    Stage,
    col,
    compile_native,
    lit,
)
from spark.rules.results import result_rows

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
        # the budget a failure went over (`common.rules.budget` kinds, or `share`), else NULL;
        # then `outputs` holds the message's reference ({topic, clientid, timestamp})
        pa.field("budget", pa.string()),
        # the message's archive id (`common.archive.schema`, "Message ids"), where the rows read
        # carried one: what the action ledger keys the actions done by
        pa.field("message_id", pa.string()),
        # the message's topic and publisher: what the journey's rule rows are found by
        pa.field("topic", pa.string()),
        pa.field("client_id", pa.string()),
        # the publisher's user name (`tenant/device`, null when no device published it): the
        # device its rule evaluations and actions are metered to (`spark.rules.metering`)
        pa.field("username", pa.string()),
    ]
)
RESULT_DDL = (
    "rule_id long, tenant string, ts timestamp, units int, status string, "
    "outputs string, error string, budget string, message_id string, topic string, "
    "client_id string, username string"
)
SHARE = "share"  # the budget kind of a row left out when its tenant used its share of a task
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
    max_outputs: int | None = None  # the tenant plan's `max_rule_outputs` (None: the default)
    version: int = field(default=1, compare=False)  # `tenants_rule.version`: the action ledger's

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
        return col("topic") == lit(topic_filter)
    prefix = "/".join(fixed)
    if not fixed:
        return None
    if levels[len(fixed)] == "#":  # `a/#` also matches `a`
        return (col("topic") == lit(prefix)) | col("topic").startswith(lit(prefix + "/"))
    return col("topic").startswith(lit(prefix + "/"))


def from_predicate(compiled: Any) -> Column:
    """What the rule's FROM can read, as a Spark predicate (a superset; the evaluator decides)."""
    events = set(getattr(compiled, "events", ()) or ())
    filters = list(getattr(compiled, "topic_filters", ()) or ())
    parts: list[Column] = []
    if filters:
        topic_preds = [filter_predicate(f) for f in filters]
        publish = col("event") == lit(EVENT_PUBLISH)
        if all(p is not None for p in topic_preds):
            combined = topic_preds[0]
            for p in topic_preds[1:]:
                combined = combined | p
            publish = publish & combined
        parts.append(publish)
    lifecycle = sorted(e for e in events if e != EVENT_PUBLISH)
    if lifecycle:
        parts.append(col("event").isin(lifecycle))
    if EVENT_PUBLISH in events and not filters:
        parts.append(col("event") == lit(EVENT_PUBLISH))
    if not parts:
        return lit(False)
    out = parts[0]
    for p in parts[1:]:
        out = out | p
    return out


def scope_predicate(specs: Sequence[RuleSpec]) -> Column:
    """Rows any of the rules may read: each rule's tenant AND its FROM."""
    from common.rules import compile_rule

    tenants = sorted({s.tenant for s in specs})
    scope = col("tenant").isin(tenants)
    if len(specs) > PUSHDOWN_LIMIT:
        return scope
    per_rule = None
    for spec in specs:
        pred = (col("tenant") == lit(spec.tenant)) & from_predicate(compile_rule(spec.sql))
        per_rule = pred if per_rule is None else per_rule | pred
    return scope & per_rule


# -- evaluation --------------------------------------------------------------------------------


def collect_outputs(
    df: DataFrame,
    specs: Sequence[RuleSpec],
    share: float | None = None,
    *,
    reuse: bool = False,
    arrow: bool = False,
) -> list:
    """`rule_outputs(df, specs, share).collect()`, with the Python pass only when some row
    needs it: the native answers first (a Spark job without a Python worker), then the
    evaluator over the rows they leave, if any. With `reuse` (`df` a plain table of rows, as
    the live feed makes them), the plan is built once per set of rules and only its input
    swapped (`_ReusedPlan`; `outputs_in_phases`), and with `arrow` its results are Arrow
    tables (`DataFrame.toArrow()`, no `Row` per result: `spark.rules.results`)."""
    if reuse and specs:
        first, later = outputs_in_phases(df, specs, share)
        tables = first + (later() if later is not None else [])
        return tables if arrow else [row for table in tables for row in result_rows(table)]
    plan = RulePlan(df, specs, share)
    if not plan.specs:
        return []
    if plan.marked is None:
        return plan.evaluated().collect()
    rows = plan.answered(pending=True).collect()
    sure = [row for row in rows if row.status != PENDING]
    if len(sure) < len(rows):
        sure += plan.evaluated().collect()
    return sure


def outputs_in_phases(
    df: DataFrame, specs: Sequence[RuleSpec], share: float | None
) -> tuple[list[pa.Table], Callable[[], list[pa.Table]] | None]:
    """The live job's evaluation of a batch (`df` a plain table of rows), its plan reused, in
    two phases: the results the native plan is sure of, from a Spark job without a Python
    worker; then, as a function to call, the Python pass over the (rule, row) pairs it left
    (None when there are none). The job acts on the first phase before it runs the second: a
    rule answered natively waits for no Python pass, of its tenant's rules or another's.
    Where no rule of the set is native (over `PUSHDOWN_LIMIT` rules none is), the Python pass
    is the first phase. Arrow tables."""
    first = _ReusedPlan.first(df, specs, share)
    if first is None:  # the reuse is off: the plan built for this batch
        first = _first_phase(RulePlan(df, specs, share))
        if first is None:
            return [], None
    table = first.toArrow()
    pending = _pending(table)
    if not pc.any(pending).as_py():
        return [table], None
    return [table.filter(pc.invert(pending))], lambda: [
        _ReusedPlan.pending(df, specs, share).toArrow()
    ]


def _first_phase(plan: RulePlan) -> DataFrame | None:
    """The native answers with the pairs left to Python, or the Python pass where no rule is
    native (None: no rule)."""
    if not plan.specs:
        return None
    return plan.evaluated() if plan.marked is None else plan.answered(pending=True)


def _pending(table: pa.Table) -> pa.ChunkedArray:
    return pc.fill_null(pc.equal(table["status"], PENDING), False)


class _ReusedPlan:
    """A set of rules' native plan (`RulePlan.answered(pending=True)`), analysed once, over any
    table of the same columns: the live job's micro-batch otherwise spends most of its time
    building the plan again (14 projections analysed one by one for a few rules: half a
    batch; bench/RESULTS.md). The plan is kept as Catalyst built it; a batch's own rows (a
    `LocalRelation`) take the place of the first batch's, their columns given the ids the plan
    refers to (a projection of aliases), and Spark optimises and runs that.

    Spark's internals, reached through py4j (`Alias`, `Project`, `withNewChildren`,
    `Dataset.ofRows`), pinned with pyspark 4.0.x (`spark/versions.py`): anything unexpected
    turns the reuse off for the process, with a warning, and the plan is built per batch as
    before (`tests/spark/test_live_feed_job.py` checks both give the same answers)."""

    _plans: dict[tuple, _ReusedPlan | None] = {}
    disabled = False

    def __init__(self, template: DataFrame) -> None:
        self.session = template.sparkSession
        jvm = self.session._jvm
        assert jvm is not None
        node = template._jdf.queryExecution().analyzed()
        self.chain = []
        while node.children().size() > 0:
            if node.children().size() != 1:
                raise ValueError(f"a plan node with several inputs: {node.getClass().getName()}")
            self.chain.append(node)
            node = node.children().apply(0)
        self.leaf_output = node.output()
        self.to_seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
        self.alias = jvm.org.apache.spark.sql.catalyst.expressions.Alias
        self.project = jvm.org.apache.spark.sql.catalyst.plans.logical.Project
        self.of_rows = jvm.org.apache.spark.sql.classic.Dataset.ofRows
        self.none = jvm.scala.Option.empty()

    def over(self, df: DataFrame) -> DataFrame:
        source = df._jdf.queryExecution().analyzed()
        columns = source.output()
        if columns.size() != self.leaf_output.size():
            raise ValueError("the rows' columns differ from the plan's")
        empty = self.to_seq([])
        aliases = []
        for index in range(columns.size()):
            wanted = self.leaf_output.apply(index)
            if columns.apply(index).name() != wanted.name():
                raise ValueError("the rows' columns differ from the plan's")
            aliases.append(
                self.alias(
                    columns.apply(index), wanted.name(), wanted.exprId(), empty, self.none, empty
                )
            )
        plan = self.project(self.to_seq(aliases), source)
        for node in reversed(self.chain):
            plan = node.withNewChildren(self.to_seq([plan]))
        return type(df)(self.of_rows(self.session._jsparkSession, plan), self.session)

    @classmethod
    def first(
        cls, df: DataFrame, specs: Sequence[RuleSpec], share: float | None
    ) -> DataFrame | None:
        """The first phase of `outputs_in_phases`: `RulePlan(df, specs, share)`'s native
        answers with the pairs left to Python (`answered(pending=True)`), or its Python pass
        where no rule is native; None where the plan cannot be reused."""

        def build() -> DataFrame | None:
            return _first_phase(RulePlan(df, specs, share))

        return cls._reuse(("first", _specs_key(specs), share, df.schema.json()), df, build)

    @classmethod
    def pending(cls, df: DataFrame, specs: Sequence[RuleSpec], share: float | None) -> DataFrame:
        """The second phase: the Python pass over the rows the natives left to it."""

        def build() -> DataFrame:
            return RulePlan(df, specs, share).evaluated()

        frame = cls._reuse(("pending", _specs_key(specs), share, df.schema.json()), df, build)
        return frame if frame is not None else build()

    @classmethod
    def _reuse(
        cls, key: tuple, df: DataFrame, build: Callable[[], DataFrame | None]
    ) -> DataFrame | None:
        if cls.disabled:
            return None
        try:
            # One lookup (`get`): the live job prepares a new rule set in another thread,
            # which may clear the cache between a membership test and a read.
            reused = cls._plans.get(key, _ALL)
            if isinstance(reused, _ReusedPlan):
                return reused.over(df)
            if reused is None:
                return None
            if len(cls._plans) >= 16:
                cls._plans.clear()
            first = build()
            cls._plans[key] = None if first is None else cls(first)
            return first
        except Exception:
            cls.disabled = True
            log.warning("rule plans are built per batch: reusing one failed", exc_info=True)
            return None


def _specs_key(specs: Sequence[RuleSpec]) -> tuple:
    return tuple((s.id, s.tenant, s.sql, s.client_prefix, s.max_outputs, s.name) for s in specs)


def rule_outputs(df: DataFrame, specs: Sequence[RuleSpec], share: float | None = None) -> DataFrame:
    """Archive rows → RESULT_SCHEMA rows: one per (rule, row whose tenant and FROM it reads).
    `share`: seconds one tenant's rules may spend of one task (the live job's
    `tenant_share_seconds()`); None, no such bound (a backfill runs every row it was asked)."""
    plan = RulePlan(df, specs, share)
    return plan.results()


SURE_COLUMN = "_res"  # the (rule, status, outputs) answered natively for the row
PY_COLUMN = "_py"  # the rules the Python evaluator must answer for the row
UNITS_COLUMN = "_units"  # its units, computed natively (its payload may not be sent)
_HELPER_COLUMNS = (SURE_COLUMN, PY_COLUMN, UNITS_COLUMN)
_SURE_TYPE = "array<struct<rule_id:long,status:string,outputs:string>>"


class RulePlan:
    """The rules over one DataFrame of archive rows, as native Spark columns first
    (`spark/rules/native.py`: whole rules, per row where their answer is exact) and the Python
    evaluator (`CompiledRule.apply`) for the rest: rules with no native form, and the rows a
    native rule is not sure of. `marked` holds per row the native answers (`_res`), the rules
    Python must still answer (`_py`) and its units; only a row with some `_py` rule carries its
    columns to the Python worker."""

    def __init__(
        self, df: DataFrame, specs: Sequence[RuleSpec], share: float | None = None
    ) -> None:
        self.share = share
        self.specs = list(specs)
        self.df = df
        self.native: dict[int, NativeRule] = {}
        self.marked: DataFrame | None = None
        self.statuses: DataFrame | None = None
        if not self.specs:
            return
        needed = {*_EVALUATOR_COLUMNS, MESSAGE_ID}
        for spec in self.specs:
            needed.update(_compiled(spec.sql).archive_columns)
        self.columns = [name for name in df.columns if name in needed]
        # History parts store their payloads' common fields typed (`payload_fields`): the stage
        # reads them instead of parsing (native rules only; never shipped to Python).
        typed = _typed_fields(df)
        # The columns are built once per set of rules (a few hundred py4j calls each time would
        # cost the live job about a second per micro-batch), then applied to each DataFrame.
        key = (
            tuple((s.id, s.tenant, s.sql, s.client_prefix) for s in self.specs),
            tuple(df.columns),
            tuple(sorted(typed)),
        )
        recipe = _RECIPES.get(key)
        if recipe is None:
            # One build at a time: the live job's batch that meets a new rule set waits for the
            # build its preparing thread has begun instead of making it again beside it (two
            # builds on two cores took each twice as long: the first match after a save later).
            with _RECIPE_BUILD:
                recipe = _RECIPES.get(key)
                if recipe is None:
                    if len(_RECIPES) >= 16:
                        _RECIPES.clear()
                    recipe = _RECIPES[key] = _Recipe(self.specs, self.columns, typed)
        self.native = recipe.native
        # Each row's units natively, first: they read the property columns, which the rules may
        # not need (so they are neither shipped to Python nor carried through the stages).
        self.recipe = recipe
        self.scoped = recipe.select(df.where(recipe.scope), recipe.first)
        if recipe.layers:
            frame = self.scoped
            for index, layer in enumerate(recipe.layers):
                frame = recipe.select(frame, layer)
                if index == recipe.statuses_at:
                    self.statuses = frame  # per native rule `_s{id}`: passed|skipped|python|NULL
            self.marked = frame

    def _evaluate(self) -> Any:
        shipped = [
            (s.id, s.tenant, s.sql, s.client_prefix, s.max_outputs, s.name) for s in self.specs
        ]
        share = self.share if self.share is not None else float("inf")

        def evaluate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            evaluator = Evaluator(shipped, share)
            for batch in batches:
                out = evaluator.batch(batch)
                if out.num_rows:
                    yield out

        return evaluate

    def answered(self, pending: bool = False) -> DataFrame:
        """The results Spark answered natively; with `pending`, also one row of status
        `python` per (rule, row) left to the evaluator (so one pass can count both)."""
        assert self.marked is not None
        recipe = self.recipe
        key = ("answered", pending, MESSAGE_ID in self.marked.columns)
        if key not in recipe.extra:
            recipe.extra[key] = _answered_columns(pending, MESSAGE_ID in self.marked.columns)
        exploded, results = recipe.extra[key]
        return recipe.select(recipe.select(self.marked, exploded), results)

    def native_counts(self) -> list[dict]:
        """Per native rule, in one aggregation over the rows (no row per result): matched,
        passed, units, newest ts of the pairs answered natively, and `pending`, the pairs left to
        the evaluator; plus one `pending` entry per rule with no native form that may read a
        row. What a backfill counts before deciding whether a Python pass is needed at all."""
        assert self.marked is not None
        aggregates, names = [], []
        for spec in self.specs:
            if spec.id in self.native:
                status = col(f"_s{spec.id}")
                answered = status.isin(PASSED, SKIPPED)
                aggregates += [
                    F.count(F.when(answered, 1)),
                    F.count(F.when(status == lit(PASSED), 1)),
                    F.count(F.when(status == lit(_PYTHON), 1)),
                    F.sum(F.when(answered, col(UNITS_COLUMN))),
                    F.max(F.when(answered, col("ts"))),
                ]
            else:
                reads = (col("tenant") == lit(spec.tenant)) & from_predicate(_compiled(spec.sql))
                aggregates += [lit(0), lit(0), F.count(F.when(reads, 1)), lit(0), lit(None)]
            names.append(spec)
        # Per publisher (a row per device, not one in all): each device's units are metered to
        # it (`by_user`: username -> units); the rule's figures are the sum over them.
        grouped = self.statuses.groupBy(_username(self.statuses)).agg(*aggregates).collect()
        out = []
        for index, spec in enumerate(names):
            at = 1 + index * 5
            figures = {
                "rule_id": spec.id,
                "tenant": spec.tenant,
                "matched": 0,
                "passed": 0,
                "pending": 0,
                "units": 0,
                "max_ts": None,
                "by_user": {},
            }
            for row in grouped:
                matched, passed, pending, units, newest = row[at : at + 5]
                figures["matched"] += matched or 0
                figures["passed"] += passed or 0
                figures["pending"] += pending or 0
                figures["units"] += units or 0
                if newest is not None and (figures["max_ts"] is None or newest > figures["max_ts"]):
                    figures["max_ts"] = newest
                if units:
                    by_user = figures["by_user"]
                    by_user[row[0]] = by_user.get(row[0], 0) + units
            out.append(figures)
        return out

    def evaluated(self) -> DataFrame:
        """The results the Python evaluator answers (its rows only)."""
        if self.marked is None:
            return self.scoped.mapInArrow(self._evaluate(), RESULT_DDL)
        rows = self.marked.where(F.size(col(PY_COLUMN)) > 0).drop(SURE_COLUMN)
        return rows.mapInArrow(self._evaluate(), RESULT_DDL)

    def undecided(self) -> DataFrame:
        """Rows some rule leaves to Python (counted to skip the Python pass when there are none)."""
        assert self.marked is not None
        return self.marked.where(F.size(col(PY_COLUMN)) > 0)

    def results(self) -> DataFrame:
        if not self.specs:
            return self.df.sparkSession.createDataFrame([], RESULT_DDL)
        if self.marked is None:
            return self.evaluated()
        return self.answered().unionByName(self.evaluated())


def _answered_columns(pending: bool, has_message_id: bool) -> tuple[list, list]:
    """`RulePlan.answered`'s two projections: each row's answers exploded, then the results."""
    answers = col(SURE_COLUMN)
    if pending:
        answers = F.concat(
            answers,
            F.transform(
                col(PY_COLUMN),
                lambda rule_id: F.struct(
                    rule_id.alias("rule_id"),
                    lit(PENDING).alias("status"),
                    lit(None).cast("string").alias("outputs"),
                ),
            ).cast(_SURE_TYPE),
        )
    message_id = col(MESSAGE_ID) if has_message_id else lit(None).cast("string")
    exploded = [
        "tenant",
        "ts",
        message_id.alias(MESSAGE_ID),
        "topic",
        "client_id",
        "username",
        col(UNITS_COLUMN).alias("units"),
        F.explode(answers).alias("r"),
    ]
    results = [
        col("r.rule_id").alias("rule_id"),
        "tenant",
        "ts",
        "units",
        col("r.status").alias("status"),
        col("r.outputs").alias("outputs"),
        lit(None).cast("string").alias("error"),
        lit(None).cast("string").alias("budget"),
        MESSAGE_ID,
        "topic",
        "client_id",
        "username",
    ]
    return exploded, results


_RECIPES: dict[tuple, _Recipe] = {}
_RECIPE_BUILD = threading.Lock()


def _typed_fields(df: DataFrame) -> list[str]:
    """The typed payload columns the rows carry (`payload_fields`, history's shredded fields)."""
    if PAYLOAD_FIELDS not in df.columns:
        return []
    return [f.name for f in df.schema[PAYLOAD_FIELDS].dataType.fields]


class _Recipe:
    """The Spark columns of a set of rules: the scope, then the projections of the native plan
    (`RulePlan`), independent of any DataFrame."""

    def __init__(
        self,
        specs: list[RuleSpec],
        columns: list[str],
        typed: list[str] | None = None,
    ) -> None:
        self.specs, self.columns = specs, columns
        # Each projection's columns as one JVM sequence, made at its first use (`select`).
        self._java: dict[int, Any] = {}
        self.extra: dict[tuple, tuple[list, list]] = {}  # RulePlan.answered's projections
        self.scope = scope_predicate(specs)
        self.first = [*columns, native_units().alias(UNITS_COLUMN)]
        self.native: dict[int, NativeRule] = {}
        self.layers: list[list] = []
        self.statuses_at = -1
        if len(specs) > PUSHDOWN_LIMIT:
            return  # one plan of that many rules costs Catalyst more than Python costs the rows
        by_path: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        # Typed fields for plans of any number of rules (up to PUSHDOWN_LIMIT): since each
        # path's text is a column of its own (`Stage.texts`), 64 of the dialect's payload rules
        # in one plan over typed history compile within the JVM's 64 KB a method
        # (tests/spark/test_payload_fields.py); a plan that did not would still be right, as
        # Spark then runs the stage without generated code, only slower.
        for column in typed or []:
            path, kind = typed_field_path(column)
            by_path.setdefault(path, []).append((column, kind))
        stage = Stage(by_path)
        for spec in specs:
            try:
                self.native[spec.id] = compile_native(spec.sql, stage)
            except NotNative as exc:
                log.debug("rule %s: evaluated in Python (%s)", spec.id, exc)
            except Exception:
                log.warning("rule %s: no native form", spec.id, exc_info=True)
        if self.native:
            self._layers(stage)
            self.first += stage.typed_fields()  # read by the path layers only

    def select(self, frame: DataFrame, columns: list) -> DataFrame:
        """`frame.select(*columns)` for one of this recipe's projections. PySpark converts a
        select's columns to a JVM sequence with a py4j call per column name and per column (about
        1,400 calls for one rule's plan: 0.15-0.5 s of the live job's every micro-batch, measured
        in bench/RESULTS.md), so the sequence is converted once and kept (the lists are this
        recipe's, never changed). Where PySpark has no such sequence (Spark Connect), a plain
        select."""
        java = self._java.get(id(columns))
        if java is None:
            to_seq = getattr(frame, "_jseq", None)
            if to_seq is None:
                return frame.select(*columns)
            java = self._java[id(columns)] = (to_seq(list(columns), _to_java_column), columns)
        return type(frame)(frame._jdf.select(java[0]), frame.sparkSession)

    def _layers(self, stage: Stage) -> None:
        # In projections, so that each costly piece runs once per row: the payload parsed, the
        # variant at each path, its type and double, each comparison, then per rule its status,
        # then the arrays. No filter on these columns: Catalyst would push it below them.
        carried = [*self.columns, UNITS_COLUMN]
        layers = self.layers
        kept: list[str] = []
        if stage.uses_payload:
            shred = list(stage.fields.values())
            layers.append([*carried, *shred, *stage.parsed()])
            layers.append([*carried, *shred, VARIANT_COLUMN, stage.payload_ok()])
            kept = [*shred, VARIANT_COLUMN, PAYLOAD_OK]
            layers.append([*carried, *kept, *[e.alias(n) for n, e in stage.layer1.items()]])
            kept += list(stage.layer1)
            layers.append([*carried, *kept, *[e.alias(n) for n, e in stage.layer2.items()]])
            kept += list(stage.layer2)
            layers.append([*carried, *kept, *[e.alias(n) for n, e in stage.numbers.items()]])
            kept += list(stage.numbers)
            layers.append([*carried, *kept, *[e.alias(n) for n, e in stage.flags.items()]])
            kept += list(stage.flags)
            if stage.texts:
                layers.append([*carried, *kept, *[e.alias(n) for n, e in stage.texts.items()]])
                kept += list(stage.texts)
        if stage.layer3:
            layers.append([*carried, *kept, *[e.alias(n) for n, e in stage.layer3.items()]])
            kept += list(stage.layer3)
        statuses = []
        for spec in self.specs:
            rule = self.native.get(spec.id)
            if rule is None:
                continue
            reads = (
                (col("tenant") == lit(spec.tenant))
                & rule.takes
                & ~F.coalesce(col("client_id"), lit("")).startswith(spec.client_prefix)
            )
            # `*` outputs are built in Python: natively only the rows WHERE rejects.
            passed = lit(PASSED) if rule.outputs is not None else lit(_PYTHON)
            status = F.when(
                reads,
                F.when(rule.sure, F.when(rule.passes, passed).otherwise(lit(SKIPPED))).otherwise(
                    lit(_PYTHON)
                ),
            )
            statuses.append((spec.id, status.alias(f"_s{spec.id}"), rule.outputs))
        layers.append([*carried, *kept, *[s for _, s, _ in statuses]])
        self.statuses_at = len(layers) - 1
        answered = F.array(
            *[
                F.when(
                    col(f"_s{rule_id}").isin(PASSED, SKIPPED),
                    F.struct(
                        lit(rule_id).cast("long").alias("rule_id"),
                        col(f"_s{rule_id}").alias("status"),
                        (
                            F.when(col(f"_s{rule_id}") == lit(PASSED), outputs)
                            if outputs is not None
                            else lit(None).cast("string")
                        ).alias("outputs"),
                    ),
                )
                for rule_id, _, outputs in statuses
            ]
        )
        answered = F.filter(answered, lambda x: x.isNotNull()).cast(_SURE_TYPE)
        left = []
        for spec in self.specs:
            if spec.id in self.native:
                left.append(F.when(col(f"_s{spec.id}") == lit(_PYTHON), lit(spec.id)))
            else:
                reads = (col("tenant") == lit(spec.tenant)) & from_predicate(_compiled(spec.sql))
                left.append(F.when(reads, lit(spec.id)))
        python = F.filter(F.array(*left), lambda x: x.isNotNull()).cast("array<long>")
        layers.append([*carried, answered.alias(SURE_COLUMN), python.alias(PY_COLUMN)])
        need = F.size(col(PY_COLUMN)) > 0
        layers.append(
            [
                *[
                    col(c) if c in _ALWAYS_CARRIED else F.when(need, col(c)).alias(c)
                    for c in self.columns
                ],
                UNITS_COLUMN,
                SURE_COLUMN,
                PY_COLUMN,
            ]
        )


_PYTHON = PENDING = "python"  # a status only inside the plan: the evaluator answers it


# The MQTT 5 encoding of each archived publish property (identifier byte, then the value: a
# byte, a four-byte integer, or a string / binary with its two-byte length), as the broker meters
# it (`data_plane.broker.message.metered_size`): a rule evaluation is sized like every other
# message unit, payload + topic (UTF-8) + properties.
_FIXED_PROPERTIES = {"payload_format": 1 + 1, "message_expiry": 1 + 4}
_LENGTH_PROPERTIES = ("content_type", "response_topic", "correlation_data")  # 1 + 2 + length
_USER_PROPERTY_OVERHEAD = 1 + 2 + 2  # identifier, key length, value length


def native_units() -> Column:
    """`_units` in Spark: 5 KiB units of payload + topic + properties bytes, at least one."""
    size = F.coalesce(F.octet_length("payload"), lit(0)) + F.coalesce(
        F.octet_length("topic"), lit(0)
    )
    for name, width in _FIXED_PROPERTIES.items():
        size = size + F.when(col(name).isNotNull(), lit(width)).otherwise(lit(0))
    for name in _LENGTH_PROPERTIES:
        size = size + F.coalesce(F.octet_length(name) + lit(3), lit(0))
    pairs = F.aggregate(
        col("user_properties"),
        lit(0),
        lambda acc, p: (
            acc
            + lit(_USER_PROPERTY_OVERHEAD)
            + F.coalesce(F.octet_length(p["key"]), lit(0))
            + F.coalesce(F.octet_length(p["value"]), lit(0))
        ),
    )
    # `aggregate` has no generated code (it is evaluated row by row through its interpreter,
    # ~0.5 µs even for a NULL array): asked only of rows that have user properties.
    size = size + F.when(F.size("user_properties") > 0, pairs).otherwise(lit(0))
    return F.greatest(F.ceil(size / lit(MESSAGE_UNIT_BYTES)), lit(1)).cast("int")


# What the evaluator itself reads of every row: scope, self-trigger check, result, units.
_EVALUATOR_COLUMNS = ("event", "tenant", "ts", "topic", "client_id", "username", "payload")
# Columns every result row carries, answered natively or not.
# (`username`: the device the rule's work is metered to, `spark.rules.metering`.)
_ALWAYS_CARRIED = ("tenant", "ts", MESSAGE_ID, "topic", "client_id", "username")


_COMPILED: dict[str, Any] = {}  # per Python worker: compile each SQL once


def _compiled(sql: str) -> Any:
    rule = _COMPILED.get(sql)
    if rule is None:
        from common.rules import compile_rule

        rule = _COMPILED[sql] = compile_rule(sql)
    return rule


_ALL = object()


SHARE_VARIABLE = "RULES_TENANT_SHARE_SECONDS"
DEFAULT_SHARE_SECONDS = 0.5


def tenant_share_seconds() -> float:
    """What one tenant's rules may spend of one task (a partition of a micro-batch or of a
    backfill chunk): the operator's `RULES_TENANT_SHARE_SECONDS`, 0.5 s by default."""
    try:
        value = float(os.environ.get(SHARE_VARIABLE) or DEFAULT_SHARE_SECONDS)
    except ValueError:
        value = DEFAULT_SHARE_SECONDS
    return value if value > 0 else DEFAULT_SHARE_SECONDS


class Evaluator:
    """Runs in the Python workers: rows of one Arrow batch through the tenants' compiled rules.

    Fair across tenants: each message runs under its rule's budget (`common.rules.budget`, the
    plan's outputs per message), rows are taken round-robin by tenant, and a tenant's rules may
    spend `share` seconds of this task in all; that tenant's later rows in the task are not
    evaluated (failed, budget `share`), so one tenant's costly rules cannot hold up the rows of
    the others, which are evaluated in the same batch."""

    def __init__(
        self,
        shipped: Sequence[tuple[int, str, str, str, int | None, str]],
        share: float = DEFAULT_SHARE_SECONDS,
    ) -> None:
        from common.rules import default_budget

        self.by_tenant: dict[str, list[tuple[int, Any, str, Any, str]]] = {}
        budgets: dict[int | None, Any] = {}
        for rule_id, tenant, sql, prefix, max_outputs, name in shipped:
            if max_outputs not in budgets:
                budgets[max_outputs] = default_budget(max_outputs)
            self.by_tenant.setdefault(tenant, []).append(
                (rule_id, _compiled(sql), prefix, budgets[max_outputs], name)
            )
        self.share = share
        self.spent: dict[str, float] = {}  # seconds per tenant, over this task

    def batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        # Rows of tenants without rules never become Python objects (and never reach a rule).
        batch = batch.filter(pc.is_in(batch.column("tenant"), pa.array(list(self.by_tenant))))
        units = batch.column(UNITS_COLUMN) if UNITS_COLUMN in batch.schema.names else None
        if units is not None:
            batch = batch.drop_columns([UNITS_COLUMN])
        ids = batch.column(MESSAGE_ID) if MESSAGE_ID in batch.schema.names else None
        if ids is not None:  # carried to the results, never read by a rule
            batch = batch.drop_columns([MESSAGE_ID])
        rule_ids: list[int] = []
        taken: list[int] = []  # the batch row of each result
        statuses: list[str] = []
        outputs: list[str | None] = []
        errors: list[str | None] = []
        budgets: list[str | None] = []
        rows = _rows(batch)
        for index in _round_robin(rows):
            row = rows[index]
            tenant = row["tenant"]
            rules = self.by_tenant.get(tenant)
            if not rules:
                continue
            client_id = row["client_id"] or ""
            # The rules Spark left to Python for this row (all of them without native plan).
            left = row.pop(PY_COLUMN, _ALL)
            spent = self.spent.get(tenant, 0.0)
            started = perf_counter()
            for rule_id, compiled, prefix, budget, name in rules:
                if client_id.startswith(prefix):
                    continue  # the rule's own republished output never re-triggers it
                if left is not _ALL and rule_id not in left:
                    continue  # answered natively
                try:
                    if not compiled.reads(row["event"], row["topic"]):
                        continue
                except Exception:
                    continue
                if spent >= self.share:
                    status, output, error, over = FAILED, None, _share_error(self.share), SHARE
                else:
                    status, output, error, over = _apply(compiled, row, budget, name)
                if over is not None:
                    output = _reference(row)
                rule_ids.append(rule_id)
                taken.append(index)
                statuses.append(status)
                outputs.append(output)
                errors.append(error)
                budgets.append(over)
            self.spent[tenant] = spent + (perf_counter() - started)
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
                pa.array(budgets, pa.string()),
                (
                    pa.nulls(len(taken), pa.string())
                    if ids is None
                    else ids.cast(pa.string()).take(indices)
                ),
                batch.column("topic").take(indices).cast(pa.string()),
                batch.column("client_id").take(indices).cast(pa.string()),
                (
                    batch.column("username").take(indices).cast(pa.string())
                    if "username" in batch.schema.names
                    else pa.nulls(len(taken), pa.string())
                ),
            ],
            schema=RESULT_SCHEMA,
        )


def _round_robin(rows: list[dict]) -> list[int]:
    """Row indices taking each tenant in turn (in order within a tenant)."""
    groups: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        groups.setdefault(row["tenant"], []).append(index)
    if len(groups) <= 1:
        return list(range(len(rows)))
    order = []
    lists = list(groups.values())
    for position in range(max(map(len, lists))):
        order.extend(group[position] for group in lists if position < len(group))
    return order


def _share_error(share: float) -> str:
    return (
        f"rule exceeded its budget (share): not evaluated, the tenant's rules used their "
        f"{share:g} s of this micro-batch; run_rules --from/--to over its time evaluates it later"
    )


def _reference(row: dict) -> str:
    """Which message a failure was: what the tenant needs to find it (a dead letter's output)."""
    return json.dumps(
        {"topic": row.get("topic"), "clientid": row.get("client_id"), "timestamp": row.get("ts")},
        default=str,
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


def _apply(
    compiled: Any, row: dict, budget: Any = None, name: str | None = None
) -> tuple[str, str | None, str | None, str | None]:
    """(status, outputs JSON, error, the budget a failure went over); `metadata.rule_id` is
    the rule's name (its id in the API, as a rule's id is in EMQX's)."""
    try:
        result = compiled.apply(row, budget, name)
    except Exception as exc:  # the dialect should return errors, but a raise is a failure too
        return FAILED, None, f"{type(exc).__name__}: {exc}"[:500], None
    if result.error:
        return FAILED, None, str(result.error)[:500], result.budget
    if not result.matched:
        return SKIPPED, None, None, None
    try:
        return PASSED, json.dumps(result.outputs, default=_json_default), None, None
    except Exception as exc:
        return FAILED, None, f"output not JSON: {exc}"[:500], None


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


def _username(frame: DataFrame) -> Column:
    """The rows' `username` (archive rows written without one: null)."""
    if "username" in frame.columns:
        return col("username")
    return lit(None).cast("string").alias("username")


def rule_counts(results: DataFrame) -> DataFrame:
    """Per rule and publisher (`username`: the device its units are metered to): matched (the
    FROM took the row), passed, failed, units, newest ts, last error; `pending`: rows left to the
    evaluator (`RulePlan.answered(pending=True)`), not counted yet. The caller sums a rule's
    rows over its publishers."""
    answered = col("status") != lit(PENDING)
    return results.groupBy("rule_id", "tenant", "username").agg(
        F.sum(F.when(answered, 1).otherwise(0)).alias("matched"),
        F.sum(F.when(~answered, 1).otherwise(0)).alias("pending"),
        F.sum(F.when(col("status") == PASSED, 1).otherwise(0)).alias("passed"),
        F.sum(F.when(col("status") == FAILED, 1).otherwise(0)).alias("failed"),
        F.max(F.when(col("status") == FAILED, col("error"))).alias("last_error"),
        F.sum(F.when(answered, col("units"))).cast("long").alias("units"),
        F.max(F.when(answered, col("ts"))).alias("max_ts"),
    )
