"""The preview of a rule over a tenant's history: how many archived messages a range holds, how
many the rule matches, and its first outputs, in seconds and without Spark.

1. `archive_rows` (`scan.py`): the tenant's rows of the range, straight from the files.
2. `read`, and which (event, topic) pairs FROM takes: one GROUP BY, each distinct pair decided by
   `CompiledRule.reads` (the evaluator's own FROM), so the scope is the jobs' by construction.
   Rows the rule's own republish connections published (`$rules-{id}-…` client ids) are skipped,
   as the jobs skip them.
3. Rules with a native form (`native.py`): one DuckDB pass counts the rows it decides (matched)
   and gathers the first matching rows and the rows it is not sure of; the evaluator answers
   those. Other rules: every row FROM takes goes through the evaluator, in time order.
4. Outputs: the first `limit` matching messages in time order, through `CompiledRule.apply`
   (the dry run's and the jobs' semantics), under the jobs' budget per message.

The evaluator's share is bounded by `seconds`: past it, the rows not evaluated yet are counted
in `unevaluated` and `complete` is false (a run counts them all). The DuckDB pass is bounded by
`hard_seconds` (interrupted: `PreviewTooLong`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from time import perf_counter
from typing import Any

import duckdb
import pyarrow as pa

from common.archive.files import ArchiveChanged
from common.rule_preview import native as nat
from common.rule_preview.scan import COLUMNS, VIEW, PreviewTooLong, open_scan
from common.rules import compile_rule, default_budget

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 10
DEFAULT_SECONDS = 10.0
KEPT_UNSURE = 20_000  # rows the native pass hands over itself; beyond, a second pass streams them
RULES_CLIENT_PREFIX = "$rules-"  # as spark.rules.plan: a rule's own republish connections


@dataclass
class Preview:
    read: int = 0  # archived messages (and lifecycle events) of the tenant in the range
    considered: int = 0  # of those, what the rule's FROM takes
    matched: int = 0  # of those, what the rule matched (the dry run's `match: true`)
    failed: int = 0  # of those, whose evaluation failed (bad JSON, a function's error, budget)
    unevaluated: int = 0  # taken rows not evaluated within the preview's time
    complete: bool = True
    decided_natively: int = 0  # rows DuckDB decided without the evaluator
    outputs: list[Any] = field(default_factory=list)  # the first outputs, in time order
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def select_row() -> str:
    """The archive row as the evaluator reads it (`ts` in epoch milliseconds)."""
    return ", ".join("epoch_ms(ts) AS ts" if c == "ts" else c for c in COLUMNS)


def struct_row() -> str:
    return (
        "struct_pack("
        + ", ".join("ts := epoch_ms(ts)" if c == "ts" else f"{c} := {c}" for c in COLUMNS)
        + ")"
    )


class _Evaluation:
    def __init__(self, sql: str, tenant: str, max_outputs: int | None, deadline: float) -> None:
        self.rule = compile_rule(sql)
        self.budget = default_budget(max_outputs)
        self.tenant = tenant
        self.deadline = deadline
        self.matched = self.failed = self.evaluated = 0
        self.stopped = False
        self.first: list[tuple[int, list[Any]]] = []  # (ts, outputs) of the first matches evaluated
        self.decided: list[tuple[int, list[Any]]] = []  # the same, of the first rows DuckDB matched

    def outputs_of(self, row: dict[str, Any]) -> list[Any] | None:
        row["tenant"] = self.tenant
        result = self.rule.apply(row, self.budget)
        if result.error is not None or not result.matched:
            return None
        outputs: list[Any] = json.loads(json.dumps(result.outputs, default=_json_default))
        return outputs

    def count(self, rows: Iterable[dict[str, Any]], limit: int) -> None:
        """Evaluate rows (in time order) until the deadline; tally them, keep the first matches."""
        for row in rows:
            if perf_counter() >= self.deadline:
                self.stopped = True
                return
            row["tenant"] = self.tenant
            result = self.rule.apply(row, self.budget)
            self.evaluated += 1
            if result.error is not None:
                self.failed += 1
            elif result.matched:
                self.matched += 1
                if len(self.first) < limit:
                    outputs = json.loads(json.dumps(result.outputs, default=_json_default))
                    self.first.append((row["ts"], outputs))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def arrow_rows(reader: pa.RecordBatchReader) -> Iterator[dict[str, Any]]:
    for batch in reader:
        yield from batch.to_pylist()


def preview(
    store: Any,
    tenant: str,
    sql: str,
    start: datetime,
    end: datetime,
    *,
    rule_id: int | None = None,
    max_outputs: int | None = None,
    limit: int = DEFAULT_LIMIT,
    seconds: float = DEFAULT_SECONDS,
    hard_seconds: float | None = None,
    threads: int | None = None,
    memory: str = "1GB",
    attempts: int = 3,
) -> Preview:
    """The preview of `sql` over `tenant`'s archive in [start, end) (see the module)."""
    for attempt in range(attempts):
        try:
            return _preview(
                store, tenant, sql, start, end, rule_id, max_outputs, limit, seconds,
                hard_seconds, threads, memory,
            )  # fmt: skip
        except (ArchiveChanged, duckdb.IOException):
            # A compaction moved files between the listing and the read: list again.
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _preview(
    store: Any,
    tenant: str,
    sql: str,
    start: datetime,
    end: datetime,
    rule_id: int | None,
    max_outputs: int | None,
    limit: int,
    seconds: float,
    hard_seconds: float | None,
    threads: int | None,
    memory: str,
) -> Preview:
    started = perf_counter()
    evaluation = _Evaluation(sql, tenant, max_outputs, started + seconds)
    con = duckdb.connect()
    watchdog = threading.Timer(hard_seconds or 3 * seconds + 10, con.interrupt)
    watchdog.daemon = True
    watchdog.start()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"SET memory_limit = {nat.literal(memory)}")  # in a web process
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        open_scan(con, store, tenant, start, end)
        result = Preview()
        pairs = con.execute(f"SELECT event, topic, count(*) FROM {VIEW} GROUP BY ALL").fetchall()
        result.read = sum(n for _, _, n in pairs)
        taken = [(e, t) for e, t, _ in pairs if evaluation.rule.reads(e, t)]
        if taken:
            considered_view(con, taken, len(taken) == len(pairs), rule_id)
            _evaluate(con, sql, evaluation, result, limit)
        result.matched += evaluation.matched
        result.failed += evaluation.failed
        result.complete = not evaluation.stopped
        if evaluation.stopped:
            result.unevaluated = result.considered - result.decided_natively - evaluation.evaluated
        firsts = sorted(evaluation.first + evaluation.decided, key=lambda item: item[0])
        result.outputs = [output for _, outputs in firsts for output in outputs][:limit]
        result.seconds = round(perf_counter() - started, 3)
        return result
    except duckdb.InterruptException:
        raise PreviewTooLong(
            "the range holds more than a preview reads in its time: narrow it, or run the rule"
        ) from None
    finally:
        watchdog.cancel()
        con.close()


def considered_view(
    con: duckdb.DuckDBPyConnection, taken: list[Any], every_pair: bool, rule_id: int | None
) -> None:
    conditions = []
    if rule_id is not None:
        prefix = nat.literal(f"{RULES_CLIENT_PREFIX}{int(rule_id)}-")
        conditions.append(f"NOT starts_with(coalesce(a.client_id, ''), {prefix})")
    if every_pair:
        source = f"{VIEW} a"
    else:
        pairs = pa.table(
            {"event": [e for e, _ in taken], "topic": [t for _, t in taken]},
            schema=pa.schema([("event", pa.string()), ("topic", pa.string())]),
        )
        con.register("_taken_pairs", pairs)
        source = (
            f"{VIEW} a SEMI JOIN _taken_pairs p ON a.event IS NOT DISTINCT FROM p.event "
            "AND a.topic IS NOT DISTINCT FROM p.topic"
        )
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    con.execute(f"CREATE OR REPLACE TEMP VIEW considered AS SELECT a.* FROM {source}{where}")


def _evaluate(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    evaluation: _Evaluation,
    result: Preview,
    limit: int,
) -> None:
    try:
        rule = nat.compile_native(sql)
    except nat.NotNative as exc:
        log.debug("preview in Python: %s", exc)
        rule = None
    except Exception:
        log.warning("preview: no native form", exc_info=True)
        rule = None
    if rule is not None:
        try:
            _native(con, rule, evaluation, result, limit)
            return
        except (duckdb.InterruptException, duckdb.IOException):
            raise
        except duckdb.Error:
            # A gap in the translation costs time, never a result: the evaluator answers all.
            log.warning("preview: the native pass failed; evaluating in Python", exc_info=True)
            evaluation.matched = evaluation.failed = evaluation.evaluated = 0
            evaluation.first.clear()
            evaluation.decided.clear()
            result.matched = result.decided_natively = 0
    result.considered = con.execute("SELECT count(*) FROM considered").fetchall()[0][0]
    reader = con.sql(f"SELECT {select_row()} FROM considered ORDER BY ts").to_arrow_reader(4096)
    evaluation.count(arrow_rows(reader), limit)


def judged_sql(rule: nat.NativeRule) -> str:
    stage = rule.stage
    layers = ["considered"]
    if stage.reads_payload:
        layers.append(f"SELECT *, try(decode(payload)) AS {nat.TEXT} FROM @@PREV@@")
    if stage.paths:
        layers.append(f"SELECT *, {stage.extraction()} FROM @@PREV@@")
        layers.append(f"SELECT *, {stage.hazards()} FROM @@PREV@@")
        layers.append(f"SELECT *, {stage.values()} FROM @@PREV@@")
    layers.append(f"SELECT *, {rule.sure} AS _sure, {rule.passes} AS _passes FROM @@PREV@@")
    ctes, prev = [], layers[0]
    for index, layer in enumerate(layers[1:]):
        name = f"_l{index}"
        ctes.append(f"{name} AS ({layer.replace('@@PREV@@', prev)})")
        prev = name
    return "WITH " + ", ".join(ctes) + f" SELECT * FROM {prev}"


def _native(
    con: duckdb.DuckDBPyConnection,
    rule: nat.NativeRule,
    evaluation: _Evaluation,
    result: Preview,
    limit: int,
) -> None:
    judged = judged_sql(rule)
    row = struct_row()
    considered, matched, unsure, first, kept = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE _sure AND _passes), "
        f"count(*) FILTER (WHERE NOT _sure), "
        f"min_by({row}, ts, {int(limit)}) FILTER (WHERE _sure AND _passes), "
        f"min_by({row}, ts, {KEPT_UNSURE}) FILTER (WHERE NOT _sure) FROM ({judged})"
    ).fetchall()[0]
    result.considered = considered
    result.decided_natively = considered - unsure
    result.matched = matched
    for message in first or []:
        outputs = evaluation.outputs_of(message)
        if outputs is not None:
            evaluation.decided.append((message["ts"], outputs))
    if not unsure:
        return
    if unsure <= KEPT_UNSURE:
        rows: Iterable[dict[str, Any]] = sorted(kept or [], key=lambda message: message["ts"])
    else:
        rows = arrow_rows(
            con.sql(
                f"SELECT {select_row()} FROM ({judged}) WHERE NOT _sure ORDER BY ts"
            ).to_arrow_reader(4096)
        )
    evaluation.count(rows, limit)
