"""Reading a tenant's journey (selectors): where its messages went, what its clients lived.

The rows are Parquet files in the object store (`common.journey.schema`); DuckDB answers the
queries in process, with no cluster: on the embedded default it reads the files where they lie,
elsewhere (S3) this module fetches the objects first (DuckDB's S3 extension would be a download
at run time). Every query is scoped by construction: the files listed are the tenant's own and
the tenant's live segments' rows, and the SQL filters on the tenant again.

Pages are newest first. `cursor` continues a page: the time of the last row shown and how many
rows at that very millisecond were shown, so rows sharing a millisecond are neither repeated nor
skipped.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from common.journey.files import conform, journey_files
from common.journey.schema import CLIENT_EVENTS, CLIENTS, MESSAGES, OUTCOMES, SCHEMAS
from common.mqtt.errors import MQTTError
from common.mqtt.topics import topic_filter_regex as mqtt_topic_filter_regex
from common.mqtt.topics import validate_topic_filter
from common.stores.object_store import LocalObjectStore, ObjectNotFound, open_object_store

DEFAULT_WINDOW = timedelta(hours=24)
MAX_WINDOW = timedelta(days=31)


class JourneyQueryError(ValueError):
    """A parameter the caller got wrong; the message names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    cursor: str | None  # for the next (older) page; None: this was the last


def topic_filter_regex(topic_filter: str) -> str:
    """An MQTT filter as a regular expression over whole topics (DuckDB's `regexp_full_match`):
    the codec's one translation, after a check whose error names the query parameter."""
    try:
        validate_topic_filter(topic_filter)
    except MQTTError as exc:
        raise JourneyQueryError("topic", f"not a valid topic filter: {exc}") from None
    return mqtt_topic_filter_regex(topic_filter)


def parse_time(value: str | None, field: str) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise JourneyQueryError(
            field, f"{field}: expected an ISO 8601 time, got {value[:40]!r}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def window(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    end = end or datetime.now(UTC)
    start = start or end - DEFAULT_WINDOW
    if start >= end:
        raise JourneyQueryError("from", "`from` must be before `to`")
    if end - start > MAX_WINDOW:
        raise JourneyQueryError("from", f"a query spans at most {MAX_WINDOW.days} days")
    return start, end


def _parse_cursor(cursor: str | None) -> tuple[int, int] | None:
    if not cursor:
        return None
    ms, _, seen = cursor.partition(".")
    if not ms.isdigit() or not seen.isdigit():
        raise JourneyQueryError("cursor", "not a cursor this API gave")
    return int(ms), int(seen)


_SQL_TYPES = {
    pa.string(): "VARCHAR",
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
}


class JourneyReader:
    """Queries over one object store (the process's own by default)."""

    def __init__(self, store: Any = None) -> None:
        self.store = store if store is not None else open_object_store()

    def _source(self, con: Any, stream: str, tenant: str, start: datetime, end: datetime) -> str:
        """A relation name holding the candidate rows (not yet filtered)."""
        keys = [key for key, _ in journey_files(self.store, stream, tenant, start, end)]
        if not keys:
            return ""
        if isinstance(self.store, LocalObjectStore):
            paths = [str(self.store.root / key) for key in keys]
            files = con.read_parquet(paths, union_by_name=True)
            missing = [f for f in SCHEMAS[stream] if f.name not in files.columns]
            if missing:  # files older than a column: null there, as `conform` does
                nulls = ", ".join(f"NULL::{_SQL_TYPES[f.type]} AS {f.name}" for f in missing)
                files = files.select(f"*, {nulls}")
            files.create_view("rows")
            return "rows"
        tables = []
        for key in keys:
            try:
                tables.append(conform(pq.read_table(io.BytesIO(self.store.get(key))), stream))
            except ObjectNotFound:  # compacted between listing and reading: list again
                return self._source(con, stream, tenant, start, end)
        con.register("rows", pa.concat_tables(tables))
        return "rows"

    def topic_rates(self, tenant: str, start: datetime, end: datetime) -> dict[str, float]:
        """Each topic's PUBLISHes the broker took (delivered or not) per minute over [start,
        end); none this time if a file went to compaction meanwhile."""
        con = duckdb.connect()
        try:
            source = self._source(con, MESSAGES, tenant, start, end)
            if not source:
                return {}
            counts = con.sql(
                f"SELECT topic, count(*) FROM {source} WHERE tenant = ? AND ts >= ? AND ts < ? "
                "AND outcome IN ('delivered', 'no_subscribers') GROUP BY topic",
                params=[tenant, start, end],
            ).fetchall()
        except (duckdb.IOException, ObjectNotFound):
            return {}
        finally:
            con.close()
        minutes = (end - start).total_seconds() / 60
        return {topic: count / minutes for topic, count in counts}

    def _page(self, *args: Any) -> Page:
        try:
            return self._query(*args)
        except (duckdb.IOException, ObjectNotFound):  # compacted between listing and reading
            return self._query(*args)

    def _query(
        self,
        stream: str,
        tenant: str,
        start: datetime,
        end: datetime,
        conditions: list[str],
        params: list[Any],
        limit: int,
        cursor: str | None,
    ) -> Page:
        position = _parse_cursor(cursor)
        con = duckdb.connect()
        try:
            source = self._source(con, stream, tenant, start, end)
            if not source:
                return Page([], None)
            where = ["tenant = ?", "ts >= ?", "ts < ?", *conditions]
            values: list[Any] = [tenant, start, end, *params]
            offset = 0
            if position is not None:  # the cursor's millisecond comes first: skip rows shown
                ms, offset = position
                where.append("epoch_ms(ts) <= ?")
                values.append(ms)
            order = (
                "ts DESC, version DESC"
                if stream == CLIENTS
                else "ts DESC, node, client_id, topic, outcome, subscriber NULLS FIRST, "
                "rule NULLS FIRST, packet_id"
            )
            sql = (
                f"SELECT * FROM {source} WHERE {' AND '.join(where)} "
                f"ORDER BY {order} LIMIT ? OFFSET ?"
            )
            table = con.sql(sql, params=[*values, limit + 1, offset]).to_arrow_table()
        finally:
            con.close()
        rows = table.to_pylist()
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = None
        if more and rows:
            last_ms = int(rows[-1]["ts"].timestamp() * 1000)
            shown = sum(1 for r in rows if int(r["ts"].timestamp() * 1000) == last_ms)
            if position is not None and position[0] == last_ms:
                shown += offset
            next_cursor = f"{last_ms}.{shown}"
        return Page(rows, next_cursor)

    def messages(
        self,
        tenant: str,
        *,
        start: datetime,
        end: datetime,
        topic: str | None = None,
        client: str | None = None,
        outcome: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        conditions: list[str] = []
        params: list[Any] = []
        if topic:
            conditions.append("regexp_full_match(topic, ?)")
            params.append(topic_filter_regex(topic))
        if client:
            conditions.append("client_id = ?")
            params.append(client)
        if outcome:
            wanted = [o for o in outcome.split(",") if o]
            unknown = [o for o in wanted if o not in OUTCOMES]
            if unknown:
                raise JourneyQueryError(
                    "outcome", f"unknown outcome {unknown[0][:40]!r}; one of {', '.join(OUTCOMES)}"
                )
            conditions.append(f"outcome IN ({', '.join('?' for _ in wanted)})")
            params.extend(wanted)
        return self._page(MESSAGES, tenant, start, end, conditions, params, limit, cursor)

    def client_events(
        self,
        tenant: str,
        client_id: str,
        *,
        start: datetime,
        end: datetime,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        return self._page(
            CLIENTS, tenant, start, end, ["client_id = ?"], [client_id], limit, cursor
        )

    def tenant_events(
        self,
        tenant: str,
        *,
        start: datetime,
        end: datetime,
        client: str | None = None,
        event: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """Every client's events of the tenant (`event`: one or more, comma-separated), e.g. who
        failed to connect and why; `client_events` is one client's life."""
        conditions: list[str] = []
        params: list[Any] = []
        if client:
            conditions.append("client_id = ?")
            params.append(client)
        if event:
            wanted = [e for e in event.split(",") if e]
            unknown = [e for e in wanted if e not in CLIENT_EVENTS]
            if unknown:
                raise JourneyQueryError(
                    "event", f"unknown event {unknown[0][:40]!r}; one of {', '.join(CLIENT_EVENTS)}"
                )
            conditions.append(f"event IN ({', '.join('?' for _ in wanted)})")
            params.extend(wanted)
        return self._page(CLIENTS, tenant, start, end, conditions, params, limit, cursor)


def topic_rates(
    tenant: str, *, minutes: int = 5, store: Any = None, now: datetime | None = None
) -> dict[str, float]:
    """Messages per minute of each of the tenant's topics over the last `minutes` (from the
    journey: PUBLISHes the broker took, delivered or not), for the topic tree."""
    end = now or datetime.now(UTC)
    return JourneyReader(store).topic_rates(tenant, end - timedelta(minutes=minutes), end)
