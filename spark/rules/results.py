"""A live micro-batch's results on the driver: the rows something happened to, one by one, and
the rest counted.

Most of what a live job evaluates is a reading a rule reads and does not match (`skipped`: its
WHERE did not hold). Each such row changes only figures: the rule's `matched`, its units and
the publisher's metering, the budget watch's count of evaluations. Made into a Python object
each (pyspark's `Row`, a `collect()`), they were most of a busy batch's time on the driver; here
the results come as Arrow (`DataFrame.toArrow()`), the plain skipped rows are summed per
(rule, tenant, publisher) by Arrow, and only the others (passed, failed, over a budget) become
rows, with the attributes `Row` has and its timestamps (naive, local time: pyspark's
`TimestampType.fromInternal`), so what reads them cannot tell."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

RESULT_FIELDS = (
    "rule_id",
    "tenant",
    "ts",
    "units",
    "status",
    "outputs",
    "error",
    "budget",
    "message_id",
    "topic",
    "client_id",
    "username",
)
ResultRow = namedtuple("ResultRow", RESULT_FIELDS)  # type: ignore[misc]
SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Skipped:
    """Plain skipped results of one rule and publisher in a batch: how many, their units."""

    rule_id: int
    tenant: str
    username: str | None
    count: int
    units: int


@dataclass(slots=True)
class BatchResults:
    rows: list[Any] = field(default_factory=list)  # ResultRow or pyspark Row
    skipped: list[Skipped] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows) + sum(s.count for s in self.skipped)

    @classmethod
    def of(
        cls, results: BatchResults | pa.Table | Sequence[pa.Table] | Iterable[Any]
    ) -> BatchResults:
        """From Arrow tables (the live feed's way) or rows (`Row`s, the file stream's way and
        the tests'), kept as they are."""
        if isinstance(results, BatchResults):
            return results
        if isinstance(results, pa.Table):
            return cls._of_tables([results])
        items = list(results)
        if items and all(isinstance(t, pa.Table) for t in items):
            return cls._of_tables(items)
        return cls(rows=items)

    @classmethod
    def _of_tables(cls, tables: Sequence[pa.Table]) -> BatchResults:
        out = cls()
        for table in tables:
            if not table.num_rows:
                continue
            table = table.select(list(RESULT_FIELDS))
            plain = pc.and_(
                pc.equal(table["status"], SKIPPED),
                pc.and_(pc.is_null(table["budget"]), pc.is_null(table["error"])),
            )
            plain = pc.fill_null(plain, False)
            out.rows += result_rows(table.filter(pc.invert(plain)))
            sums = (
                table.filter(plain)
                .group_by(["rule_id", "tenant", "username"], use_threads=False)
                .aggregate([("units", "sum"), ("rule_id", "count")])
            )
            for rule_id, tenant, username, units, count in zip(
                sums["rule_id"].to_pylist(),
                sums["tenant"].to_pylist(),
                sums["username"].to_pylist(),
                sums["units_sum"].to_pylist(),
                sums["rule_id_count"].to_pylist(),
                strict=True,
            ):
                out.skipped.append(Skipped(rule_id, tenant, username, count, units or 0))
        return out


def result_rows(table: pa.Table) -> list[Any]:
    """The table's results as `ResultRow`s (what `Row` would give: naive local timestamps)."""
    columns = {name: table[name].to_pylist() for name in RESULT_FIELDS if name != "ts"}
    ts = table["ts"]
    if ts.type.unit != "us":
        ts = ts.cast(pa.timestamp("us", tz=ts.type.tz))
    columns["ts"] = [_local(t) for t in ts.cast(pa.int64()).to_pylist()]
    return [ResultRow(*values) for values in zip(*(columns[n] for n in RESULT_FIELDS), strict=True)]


def _local(micros: int | None) -> datetime | None:
    """As pyspark's `TimestampType.fromInternal`: naive, in this process's time zone."""
    if micros is None:
        return None
    return datetime.fromtimestamp(micros // 1_000_000).replace(microsecond=micros % 1_000_000)
