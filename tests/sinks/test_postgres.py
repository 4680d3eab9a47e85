"""The Postgres sink against a database of the tenant's own on the embedded cluster: rows read
back with SELECT; a hostile value beside good ones fails alone (no shared batch one value can
fail); the database down, a table not there, in words."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from common.sinks import Record, check_action, writer_for
from tests.sinks.conftest import T0, free_port, record


@pytest.fixture
def db(tenant_dsn):
    with psycopg.connect(tenant_dsn, autocommit=True) as conn:
        yield conn


def _table(db, ddl: str) -> str:
    name = f"t_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE TABLE {name} ({ddl})")
    return name


def test_default_columns_take_time_key_and_the_output(tenant_dsn, db):
    table = _table(db, "ts timestamptz, key text, payload jsonb")
    records = [
        record(1, {"t": 21.5}, key="pump-1"),
        record(2, {"t": 22}, key="pump-2", ts_ms=T0 + 1),
    ]
    writer = writer_for({"type": "postgres", "dsn": tenant_dsn, "table": table}, "acme")
    assert [r.ok for r in writer.send(records)] == [True, True]
    writer.close()
    rows = db.execute(f"SELECT ts, key, payload FROM {table} ORDER BY ts").fetchall()
    assert rows == [
        (datetime.fromtimestamp(T0 / 1000, UTC), "pump-1", {"t": 21.5}),
        (datetime.fromtimestamp((T0 + 1) / 1000, UTC), "pump-2", {"t": 22}),
    ]


def test_a_column_mapping_into_a_schema_qualified_table_with_odd_names(tenant_dsn, db):
    db.execute('CREATE SCHEMA IF NOT EXISTS "Plant Data"')
    db.execute(
        'CREATE TABLE "Plant Data"."Readings; DROP" (device text, temp numeric, at timestamptz,'
        ' "all" jsonb, note text, n int)'
    )
    columns = {
        "device": "${clientid}",
        "temp": "${payload.temp}",
        "at": "${at}",
        "all": "${payload}",
        "note": "t=${payload.temp} by ${clientid}",
        "n": "${payload.missing}",  # missing: NULL, not `undefined`
    }
    action = {"type": "postgres", "dsn": tenant_dsn, "table": "Plant Data.Readings; DROP",
              "columns": columns}  # fmt: skip
    output = {"clientid": "pump-1", "payload": {"temp": 71.25}, "at": "2026-12-07T12:00:00Z"}
    writer = writer_for(action, "acme")
    assert check_action(action, "acme") is None
    assert writer.send([record(1, output)])[0].ok
    writer.close()
    row = db.execute('SELECT * FROM "Plant Data"."Readings; DROP"').fetchone()
    assert row == (
        "pump-1",
        pytest.approx(71.25),
        datetime(2026, 12, 7, 12, tzinfo=UTC),
        {"temp": 71.25},
        "t=71.25 by pump-1",
        None,
    )


def test_a_hostile_value_beside_good_ones_fails_alone(tenant_dsn, db):
    table = _table(db, "ts timestamptz, key text, payload jsonb")
    good = [record(1, {"t": 1}), record(3, {"t": 3}), record(5, {"t": 5})]
    hostile = [
        record(2, {"s": "\x00"}),  # jsonb refuses \u0000
        Record(4, "nul\x00key", '{"t":4}', T0, {"t": 4}),  # text refuses NUL
    ]
    records = [good[0], hostile[0], good[1], hostile[1], good[2]]
    writer = writer_for({"type": "postgres", "dsn": tenant_dsn, "table": table}, "acme")
    results = writer.send(records)
    writer.close()
    assert [(r.ok, r.retry) for r in results] == [
        (True, True), (False, False), (True, True), (False, False), (True, True)
    ]  # fmt: skip
    assert results[1].error is not None and results[1].error.startswith("Postgres refused the row")
    assert results[1].error == (
        "Postgres refused the row: unsupported Unicode escape sequence "
        "(\\u0000 cannot be converted to text)"
    )
    assert "NUL" in str(results[3].error)
    assert db.execute(f"SELECT payload FROM {table} ORDER BY ts, payload").fetchall() == [
        ({"t": 1},), ({"t": 3},), ({"t": 5},)
    ]  # fmt: skip
    # A value the column's type refuses is the same: only that row.
    numbers = _table(db, "n int")
    action = {"type": "postgres", "dsn": tenant_dsn, "table": numbers, "columns": {"n": "${n}"}}
    results = writer_for(action, "acme").send([record(1, {"n": 1}), record(2, {"n": "two"})])
    assert [(r.ok, r.retry) for r in results] == [(True, True), (False, False)]
    assert 'invalid input syntax for type integer: "two"' in str(results[1].error)
    texts = _table(db, "s text")
    action = {"type": "postgres", "dsn": tenant_dsn, "table": texts, "columns": {"s": "${s}"}}
    results = writer_for(action, "acme").send([record(1, {"s": "\ud800"}), record(2, {"s": "ok"})])
    assert [(r.ok, r.retry) for r in results] == [(False, False), (True, True)]
    assert results[0].error == (
        "Postgres refused the row: a value is not valid Unicode (a lone surrogate)"
    )
    assert db.execute(f"SELECT n FROM {numbers}").fetchall() == [(1,)]


def test_a_table_not_there_and_a_database_down_are_words_to_retry(tenant_dsn, db):
    action = {"type": "postgres", "dsn": tenant_dsn, "table": "nope"}
    results = writer_for(action, "acme").send([record(1, {}), record(2, {})])
    assert [(r.ok, r.retry) for r in results] == [(False, True)] * 2
    assert results[0].error == 'Postgres: relation "nope" does not exist'
    assert check_action(action, "acme") == results[0].error
    table = _table(db, "ts timestamptz, key text")  # no payload column
    assert check_action({**action, "table": table}, "acme") == (
        f'Postgres: column "payload" of relation "{table}" does not exist'
    )
    down = f"postgresql://tenant:s3cret-pw@127.0.0.1:{free_port()}/x"
    [result] = writer_for({**action, "dsn": down}, "acme").send([record(1, {})])
    assert (result.ok, result.retry) == (False, True)
    assert result.error == "Postgres: could not connect to the database: connection refused"
    assert check_action({**action, "dsn": down}, "acme") == result.error
    wrong = tenant_dsn.replace("postgresql://postgres@", "postgresql://nobody:pw-9f3a@")
    assert check_action({**action, "dsn": wrong}, "acme") == (
        'Postgres: could not connect to the database: role "nobody" does not exist'
    )


def test_the_dsn_reaches_only_a_vetted_host_with_only_its_own_settings(tenant_dsn, monkeypatch):
    action = {"type": "postgres", "dsn": tenant_dsn, "table": "t"}
    words = check_action({**action, "dsn": tenant_dsn + "?passfile=/root/.pgpass"}, "acme")
    assert words == "the dsn's passfile setting is not one a sink takes"
    assert "names no host" in str(check_action({**action, "dsn": "dbname=x"}, "acme"))
    assert check_action({**action, "dsn": "host=db.example.com"}, "acme") == "the dsn names no user"
    monkeypatch.delenv("WEBHOOK_ALLOW")
    [result] = writer_for(action, "acme").send([record(1, {})])
    assert (result.ok, result.retry) == (False, True)
    assert "public addresses only" in str(result.error)
