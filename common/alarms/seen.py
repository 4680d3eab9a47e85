"""The keys an alarm's source saw in a tenant's history: what an alarm with no data over `seen`
keys watches from the moment it is switched on (issue 46: "the keys seen in the last days"),
so a device that went quiet before the alarm existed still raises once its silence passes N.

Read from the archive as the preview reads it (`common.rule_preview.scan`, DuckDB over the
tenant's own files): with the default key (`clientid`) one grouped query; with a key read from
the payload, the alarm's own rule over the messages newest first (the evaluator the live job
runs), within `seconds` — past them the keys found so far are the ones seen most recently, and
`complete` says the rest were not read. At most `limit` keys, the most recent first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from time import perf_counter
from typing import Any

from common.alarms.definition import AlarmSpec, compile_alarm, read
from common.rule_preview.preview import arrow_rows, considered_view, select_row
from common.rule_preview.scan import VIEW, watched_scan
from common.rules import default_budget


@dataclass
class SeenKeys:
    keys: list[str] = field(default_factory=list)  # the most recently seen first
    complete: bool = True  # every message of the range was read (and no more than `limit` keys)


def seen_keys(
    store: Any,
    tenant: str,
    spec: AlarmSpec,
    start: datetime,
    end: datetime,
    *,
    limit: int,
    seconds: float = 10.0,
    memory: str = "1GB",
) -> SeenKeys:
    """The keys `spec` reads from `tenant`'s archive in [start, end) (see the module)."""
    started = perf_counter()
    rule = compile_alarm(spec)
    result = SeenKeys()
    if limit <= 0:
        return SeenKeys([], False)
    with watched_scan(store, tenant, start, end, seconds=seconds, memory=memory) as con:
        pairs = con.execute(f"SELECT event, topic, count(*) FROM {VIEW} GROUP BY ALL").fetchall()
        taken = [(e, t) for e, t, _ in pairs if rule.reads(e, t)]
        if not taken:
            return result
        considered_view(con, taken, len(taken) == len(pairs), None)
        if spec.key.strip() == "clientid":
            found = con.execute(
                "SELECT client_id FROM considered WHERE coalesce(client_id, '') <> '' "
                "GROUP BY client_id ORDER BY max(ts) DESC, client_id LIMIT ?",
                [limit + 1],
            ).fetchall()
            result.keys = [k for (k,) in found[:limit]]
            result.complete = len(found) <= limit
            return result
        deadline = started + seconds
        budget = default_budget(1)
        keys: dict[str, None] = {}  # in the order first met: newest first
        reader = con.sql(f"SELECT {select_row()} FROM considered ORDER BY ts DESC")
        for row in arrow_rows(reader.to_arrow_reader(4096)):
            if perf_counter() >= deadline or len(keys) > limit:
                result.complete = False
                break
            row["tenant"] = tenant
            reading = read(rule, row, budget)
            if reading is not None:
                keys.setdefault(reading.key, None)
        result.keys = list(keys)[:limit]
        return result
