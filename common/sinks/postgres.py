"""The PostgreSQL sink: batched INSERTs into a table of the tenant's own database (TimescaleDB
hypertables take them the same way).

Columns. Without `columns`, the table has (at least) these, and each record fills them:

    ts timestamptz   -- the message's archive time
    key text         -- the ordering key (the publisher's client id by default)
    payload jsonb    -- the rule's output

With `columns` (`{"column": "${template}"}`), each column gets its template rendered from the
output (`common.rules.render_template`). A template that is one placeholder (`${payload.t}`)
gives that value itself: a missing one or JSON null is SQL NULL (not EMQX's `undefined`), a map
or array its JSON text. Every value goes to Postgres as text of unknown type, so the column's
own type reads it (`'21.5'` into a numeric, `'{"a":1}'` into jsonb, an RFC 3339 text into a
timestamptz).

No shared batch one value can fail: a batch is one multi-row INSERT in one transaction; if the
database refuses it for what a row holds (a data error: a value the column does not take, a
NUL, a constraint), the batch is inserted again row by row, each in its own transaction, so
only the refused rows fail, permanently (retrying cannot change their values). Anything else (the
connection, a missing table, a permission) fails the whole batch, to be retried.

The connection. Table and column names are identifiers (`psycopg.sql.Identifier`), never
spliced text; `table` may be `schema.table`. The host is vetted like a webhook's
(`endpoints.vetted`) and the connection made to the vetted address (libpq's `hostaddr`, the name
kept for TLS). The DSN takes only the settings listed in `ALLOWED`; nothing of the platform's
own Postgres set-up reaches the tenant's server: no password file, no client certificate, no
Kerberos, no `PG*` environment (every setting is given).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from common.rules import render_template
from common.rules.templates import lookup
from common.rules.values import JSON_NULL, json_encode, to_str
from common.sinks.base import OK, Record, Result, failed, setting
from common.sinks.endpoints import RefusedDestination, vetted

MAX_PARAMETERS = 65535  # the protocol's limit on a statement's parameters
DEFAULT_COLUMNS = ("ts", "key", "payload")
ALLOWED = (
    "host", "port", "dbname", "user", "password", "sslmode", "sslrootcert", "sslnegotiation",
    "connect_timeout", "target_session_attrs", "channel_binding",
)  # fmt: skip
CONNECT_TIMEOUT = 5
_ONE_PLACEHOLDER = re.compile(r"^\$\{\s*([^}]*?)\s*\}$")


def _value(template: str, output: dict[str, Any]) -> str | None:
    """A column's value from its template (see the module's docstring)."""
    whole = _ONE_PLACEHOLDER.match(template)
    if whole is None:
        return render_template(template, output)
    value = lookup(output, whole.group(1))
    if value is None or value is JSON_NULL:
        return None
    if isinstance(value, (dict, list)):
        return json_encode(value)
    return to_str(value)


def connection_settings(dsn: str, tenant: str) -> dict[str, str]:
    """libpq's settings for a tenant's DSN: ValueError in words for one a sink does not take.
    The vetted address (`hostaddr`) is added at each connection."""
    from psycopg import pq
    from psycopg.conninfo import conninfo_to_dict

    try:
        given = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    except Exception:
        raise ValueError("the dsn is not a PostgreSQL connection string or URL") from None
    extra = sorted(set(given) - set(ALLOWED))
    if extra:
        raise ValueError(f"the dsn's {', '.join(extra)} setting is not one a sink takes")
    host = given.get("host", "")
    if not host or "," in host or host.startswith("/"):
        raise ValueError("the dsn names no host, or more than one (a sink connects to one)")
    if not given.get("user"):
        raise ValueError("the dsn names no user")
    if given.get("sslrootcert", "system") != "system":
        raise ValueError("the dsn's sslrootcert may only be 'system'")
    timeout = min(int(given.get("connect_timeout") or CONNECT_TIMEOUT), 30)
    settings = {
        "port": "5432",
        "dbname": given["user"],  # libpq's default, said here: no default from this machine
        **given,
        "password": given.get("password", ""),
        "passfile": "/dev/null/none",  # no password file (the path cannot exist)
        "gssencmode": "disable",
        "connect_timeout": str(max(timeout, 1)),
        "application_name": f"mqtt-platform sink ({tenant})"[:63],
    }
    if pq.version() >= 160000:
        settings["sslcertmode"] = "disable"  # never the platform's client certificate
    return settings


class PostgresWriter:
    def __init__(self, action: dict[str, Any], tenant: str) -> None:
        from psycopg import sql

        self.settings = connection_settings(setting(action, "dsn"), tenant)
        self.table_name = setting(action, "table")
        parts = self.table_name.split(".")
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"'{self.table_name}' is not a table or schema.table name")
        columns = action.get("columns")
        if columns is not None and (
            not isinstance(columns, dict)
            or not columns
            or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in columns.items())
        ):
            raise ValueError("'columns' maps column names to templates (text)")
        self.columns: dict[str, str] | None = columns
        names = list(columns) if columns else list(DEFAULT_COLUMNS)
        self.table = sql.Identifier(*parts)
        self.names = sql.SQL(", ").join(sql.Identifier(n) for n in names)
        self.width = len(names)
        self.password = self.settings["password"]
        self._conn: Any = None  # psycopg.Connection[Any]; None until connected

    def _row(self, record: Record) -> tuple[Any, ...]:
        if self.columns is None:
            return (datetime.fromtimestamp(record.ts_ms / 1000, UTC), record.key, record.body)
        return tuple(_value(template, record.output) for template in self.columns.values())

    def _connect(self) -> Any:
        import psycopg
        from psycopg.conninfo import make_conninfo

        if self._conn is not None and not self._conn.closed:
            return self._conn
        host = self.settings["host"]
        address = vetted(host, int(self.settings["port"]))[0]
        conninfo = make_conninfo("", **self.settings, hostaddr=address)
        self._conn = psycopg.connect(conninfo, autocommit=True)
        return self._conn

    def _insert(self, rows: Sequence[tuple[Any, ...]]) -> None:
        from psycopg import sql

        one = sql.SQL("({})").format(sql.SQL(", ").join([sql.Placeholder()] * self.width))
        query = sql.SQL("INSERT INTO {} ({}) VALUES {}").format(
            self.table, self.names, sql.SQL(", ").join([one] * len(rows))
        )
        conn = self._connect()
        with conn.transaction():
            conn.execute("SET LOCAL statement_timeout = '30s'")  # a stuck server ends the batch
            conn.execute(query, [value for row in rows for value in row])

    def send(self, records: Sequence[Record]) -> list[Result]:
        results: list[Result] = []
        step = max(1, MAX_PARAMETERS // self.width)
        for start in range(0, len(records), step):
            results.extend(self._send(records[start : start + step]))
        return results

    def _send(self, records: Sequence[Record]) -> list[Result]:
        if not records:
            return []
        try:
            rows = [self._row(r) for r in records]
            self._insert(rows)
            return [OK] * len(records)
        except Exception as exc:
            words, row_level = self._words(exc)
            if not row_level or len(records) == 1:
                return failed(records, words, retry=not row_level)
        results = []
        for record in records:  # row by row: only the refused rows fail
            try:
                self._insert([self._row(record)])
                results.append(OK)
            except Exception as exc:
                words, row_level = self._words(exc)
                results.append(Result(False, words, retry=not row_level))
        return results

    def _words(self, exc: Exception) -> tuple[str, bool]:
        """(words, whether the row's own values were refused)."""
        import psycopg

        if isinstance(exc, RefusedDestination):
            return f"Postgres: {exc}", False
        if isinstance(exc, UnicodeError):
            return "Postgres refused the row: a value is not valid Unicode (a lone surrogate)", True
        if isinstance(exc, (psycopg.DataError, psycopg.IntegrityError)):
            diag = getattr(exc, "diag", None)
            primary = getattr(diag, "message_primary", None) or str(exc).splitlines()[0]
            detail = getattr(diag, "message_detail", None)
            words = f"{primary} ({detail.rstrip('.')})" if detail else primary
            return self._scrub(f"Postgres refused the row: {words}"), True
        self.close()  # a connection in an unknown state: a fresh one next time
        if isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None):
            primary = exc.diag.message_primary or str(exc).splitlines()[0]
            return self._scrub(f"Postgres: {primary}"), False
        if isinstance(exc, psycopg.OperationalError):
            return self._scrub(f"Postgres: {_connection_words(str(exc))}"), False
        return f"Postgres: the insert failed ({type(exc).__name__})", False

    def _scrub(self, text: str) -> str:
        if len(self.password) >= 4:
            text = text.replace(self.password, "***")
        return text[:500]

    def check(self) -> str | None:
        """The table takes the columns: an INSERT of no rows (`... SELECT NULL ... WHERE
        false`) checks that the table and its columns exist and that the user may insert."""
        from psycopg import sql

        nulls = sql.SQL(", ").join([sql.NULL] * self.width)
        query = sql.SQL("INSERT INTO {} ({}) SELECT {} WHERE false").format(
            self.table, self.names, nulls
        )
        try:
            conn = self._connect()
            with conn.transaction():
                conn.execute(query)
        except Exception as exc:
            return self._words(exc)[0]
        return None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None


def _connection_words(message: str) -> str:
    """libpq's words for a failed connection, without the address it tried."""
    tail = message.rsplit("failed: ", 1)[-1].strip().splitlines()[0]
    tail = re.sub(r"^(FATAL|ERROR):\s+", "", tail)
    if "Connection refused" in tail:
        return "could not connect to the database: connection refused"
    if "timeout" in tail.lower():
        return f"could not connect to the database within {CONNECT_TIMEOUT} s"
    if re.search(r"\d+\.\d+\.\d+\.\d+|\[?[0-9a-f]*:[0-9a-f:]+\]?", tail):
        return "could not connect to the database"
    return f"could not connect to the database: {tail}"
