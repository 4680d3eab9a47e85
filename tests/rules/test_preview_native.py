"""The preview of a rule over history (`common.rule_preview`: DuckDB over the archive's files,
the evaluator for what DuckDB is not sure of) against the evaluator alone, the dry run's and the
jobs' semantics: the Spark suite's table of rules × payloads × topics, plus payloads where
DuckDB's JSON reader and Python's part ways, through both; the figures (read, taken, matched,
failed) and the first outputs must be the same. Also: which rules DuckDB decides alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from common.archive.schema import ARCHIVE_SCHEMA
from common.rule_preview import native as nat
from common.rule_preview import preview
from common.rule_preview.preview import _json_default
from common.rules import compile_rule, default_budget
from tests.spark.conftest import message, write_live
from tests.spark.test_native import PAYLOADS, RULES, TOPICS, typed

START = datetime(2023, 11, 14, tzinfo=UTC)
END = datetime(2023, 11, 16, tzinfo=UTC)
RULE_ID = 1
# Where DuckDB's reader and Python's differ, or the budgets bite: never decided by DuckDB.
EXTRA_PAYLOADS = [
    b'{"te\\u006dp": 95, "temp": 10}',  # an escaped duplicate: Python keeps the last
    b'{"temp": 10, "te\\u006dp": 95}',
    b'{"site": {"id": 7, "id": 8}, "temp": 95}',
    b'{"note": "temp", "temp": 95}',
    b'{"temp": 95, "l": [1, 2, ]}',
    b"[" * 700 + b"]" * 700,
    b'{"temp": 95, "deep": ' + b"[" * 600 + b"]" * 600 + b"}",
    b'{"temp": 95, "s": "' + b"x" * 1_100_000 + b'"}',
    b'{"temp": 1.7976931348623157e308}',
    b'{"temp": -Infinity}',
    b'{"temp": 18446744073709551615}',
    b'{"temp": "\\ud800"}',
    b'{"a": null, "temp": null}',
    b'{"a": {"b": null}}',
    b'{"temp": "95.0"}',
    b'{"temp": " 95"}',
    b'{"temp": "0x10"}',
]
EXTRA_RULES = [
    'SELECT * FROM "#"',
    "SELECT payload AS p, topic FROM \"t/+\" WHERE topic =~ 't/#'",
    "SELECT payload.temp AS t FROM \"#\" WHERE payload.temp >= '95'",
    'SELECT payload.a.b AS b FROM "t/#" WHERE payload.a.b = 1 OR payload.a = 1',
    "SELECT clientid FROM \"t/#\" WHERE clientid IN ('dev') AND NOT qos = 1",
    "SELECT payload.temp AS t FROM \"t/#\" WHERE payload != 'null'",
    'SELECT * FROM "#" WHERE payload.big = 9007199254740992.0 OR payload.temp < 1e300',
    # not native (Python decides every row): functions, FOREACH, event sources, bound names
    'SELECT upper(payload.s) AS u FROM "#"',
    'FOREACH payload.l AS x FROM "t/#" WHERE x > 1',
    'SELECT payload.temp AS temp FROM "t/#" WHERE temp > 1',
    'SELECT * FROM "$events/client_connected"',
]


def rows() -> list[dict]:
    out, ts = [], int(START.timestamp() * 1000)
    for topic in TOPICS:
        for payload in [*PAYLOADS, *EXTRA_PAYLOADS]:
            body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            ts += 1
            client = "dev" if ts % 3 else "other-dev"
            out.append(message("acme", topic, body, ts, client_id=client, qos=ts % 2))
    ts += 1  # the rule's own republished output: skipped, as the jobs skip it
    out.append(message("acme", "t/a", {"temp": 95}, ts, client_id=f"$rules-{RULE_ID}-x"))
    ts += 1
    out.append(message("other", "t/a", {"temp": 95}, ts))  # another tenant's: never read
    ts += 1
    connected = message("acme", None, b"", ts, event="client.connected")
    out.append({**connected, "payload": None, "peer": "10.0.0.1:5"})
    return out


def expected(sql: str, data: list[dict], limit: int = 10) -> dict:
    rule = compile_rule(sql)
    budget = default_budget()
    figures = {"read": 0, "considered": 0, "matched": 0, "failed": 0, "outputs": []}
    for row in data:
        if row["tenant"] != "acme":
            continue
        figures["read"] += 1
        if not rule.reads(row["event"], row["topic"]):
            continue
        if (row["client_id"] or "").startswith(f"$rules-{RULE_ID}-"):
            continue
        figures["considered"] += 1
        full = {name: row.get(name) for name in ARCHIVE_SCHEMA.names}
        result = rule.apply(full, budget)
        if result.error is not None:
            figures["failed"] += 1
        elif result.matched:
            figures["matched"] += 1
            figures["outputs"] += json.loads(json.dumps(result.outputs, default=_json_default))
    figures["outputs"] = typed(figures["outputs"][:limit])
    return figures


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    from common.stores.object_store import LocalObjectStore

    store = LocalObjectStore(tmp_path_factory.mktemp("preview") / "objects")
    data = rows()
    # Two segments of one hour, as two brokers write them (tenants interleaved).
    write_live(store, data[::2], writer="broker-a")
    write_live(store, data[1::2], writer="broker-b")
    return store, data


def figures_of(result) -> dict:
    return {
        "read": result.read,
        "considered": result.considered,
        "matched": result.matched,
        "failed": result.failed,
        "outputs": typed(result.outputs),
    }


@pytest.mark.parametrize("sql", [*RULES, *EXTRA_RULES])
def test_preview_gives_the_evaluators_figures_and_first_outputs(archive, sql, caplog):
    store, data = archive
    result = preview(store, "acme", sql, START, END, rule_id=RULE_ID, seconds=60)
    assert result.complete
    assert figures_of(result) == expected(sql, data)
    assert "native pass failed" not in caplog.text  # DuckDB decided what it could


def test_the_usual_rules_are_decided_by_duckdb_alone_on_well_formed_payloads(tmp_path):
    from common.stores.object_store import LocalObjectStore

    store = LocalObjectStore(tmp_path / "objects")
    ts = int(START.timestamp() * 1000)
    data = [
        message("acme", f"sensors/d{i % 7}/telemetry", {"temp": i % 100, "site": {"id": i % 10}},
                ts + i)
        for i in range(2000)
    ]  # fmt: skip
    write_live(store, data)
    sql = (
        'SELECT payload.site.id AS site, payload.temp AS temp FROM "sensors/#" '
        "WHERE payload.temp > 90 AND payload.site.id = 7"
    )
    result = preview(store, "acme", sql, START, END)
    assert result.decided_natively == result.considered == 2000
    assert figures_of(result) == expected(sql, data)
    assert result.outputs[0] == {"site": 7, "temp": 97}


@pytest.mark.parametrize(
    "sql, native",
    [
        ('SELECT * FROM "t/#" WHERE payload.temp > 90', True),
        (
            "SELECT payload.a AS a, clientid FROM \"t/#\" WHERE topic =~ 't/+' AND qos IN (0, 1)",
            True,
        ),
        ('SELECT upper(payload.s) AS u FROM "t/#"', False),
        ('SELECT payload.n AS n FROM "t/#" WHERE payload.open AND NOT payload.closed', True),
        ('SELECT payload.temp AS temp FROM "t/#" WHERE temp > 1', False),
        ('SELECT payload.c FROM "t/#" WHERE payload.t > 1', False),  # binds `payload`
        ('FOREACH payload.l AS x FROM "t/#"', False),
        ('SELECT * FROM "$events/client_connected"', False),
    ],
)
def test_which_rules_compile_for_duckdb(sql, native):
    try:
        nat.compile_native(sql)
    except nat.NotNative:
        assert not native
    else:
        assert native


def test_a_preview_past_its_time_says_what_it_did_not_evaluate(archive):
    store, data = archive
    result = preview(store, "acme", 'SELECT upper(payload.s) AS u FROM "#"', START, END, seconds=0)
    assert not result.complete
    assert result.unevaluated == result.considered > 0
    assert result.matched == result.failed == 0


def test_another_tenants_rows_and_other_ranges_are_never_read(archive):
    store, _ = archive
    result = preview(store, "other", 'SELECT * FROM "#"', START, END)
    assert (result.read, result.matched) == (1, 1)
    later = preview(store, "acme", 'SELECT * FROM "#"', END, datetime(2023, 11, 17, tzinfo=UTC))
    assert (later.read, later.matched, later.outputs) == (0, 0, [])


def test_archive_rows_without_some_columns_still_preview(tmp_path):
    """A segment from an older writer, lacking columns: they read as NULL."""
    from common.archive.schema import live_segment_key
    from common.stores.object_store import LocalObjectStore

    store = LocalObjectStore(tmp_path / "objects")
    ts = int(START.timestamp() * 1000) + 5
    table = pa.table(
        {
            "event": ["message.publish"],
            "tenant": ["acme"],
            "ts": pa.array([ts], pa.timestamp("ms", tz="UTC")),
            "topic": ["t/a"],
            "payload": [b'{"temp": 95}'],
        }
    )
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    store.put(live_segment_key(ts, "old", 1), sink.getvalue().to_pybytes())
    result = preview(store, "acme", 'SELECT payload.temp AS t, clientid FROM "t/#"', START, END)
    assert (result.read, result.matched) == (1, 1)
    assert result.outputs == [{"t": 95, "clientid": None}]
