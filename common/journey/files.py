"""Reading, compacting and expiring the journey's files (layout: `common.journey.schema`).

Compaction follows the archive's protocol (`common.archive.files`), simplified: the journey's rows
are small and few per tenant, so an hour is compacted in one round into one file per tenant, and
its live folder then gets `_COMPACTED`, a JSON object naming the segments now in tenant files
and those files. Parts are written first, the marker second, the segments deleted last: a crash
at any step leaves a reader (`journey_files`) seeing every row once, either in the segments (no
marker, or not named in it) or in the parts the marker names. A segment uploaded late (after the
marker) is compacted by the next round, into a new part named by the updated marker.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.archive.files import HOUR, hours_between, key_hour
from common.journey.schema import (
    COMPACTED_MARKER,
    JOURNEY_PREFIX,
    SCHEMAS,
    STREAMS,
    hour_partition,
    live_prefix,
    tenant_prefix,
)
from common.stores.isolation import each_alone_sync
from common.stores.object_store import ObjectNotFound
from common.stores.postgres_text import utf8_text

log = logging.getLogger(__name__)


def conform(table: pa.Table, stream: str) -> pa.Table:
    """`table` in the stream's schema: plain types (live segments use dictionaries), every
    column present (null where a writer had none), in order."""
    schema = SCHEMAS[stream]
    columns = []
    for field_ in schema:
        if field_.name in table.column_names:
            columns.append(table[field_.name].cast(field_.type))
        else:
            columns.append(pa.nulls(table.num_rows, field_.type))
    return pa.Table.from_arrays(columns, schema=schema)


# Columns of words about a row (a refusal's or an error's reason, a detail): made encodable
# before a segment is built, as they may quote what a tenant sent.
_DESCRIPTIVE = ("reason", "detail")


def rows_table(rows: list[dict[str, Any]], schema: pa.Schema, batch: str) -> pa.Table:
    """A segment's rows, every tenant's, as a table of `schema`. The words in `reason` and
    `detail` have their lone surrogates escaped (UTF-8, so Arrow, cannot hold them); a row that
    Arrow still refuses (a value outside its column's type) is left out alone, counted and
    logged (`common.stores.isolation`), so it never costs the segment the other rows."""
    for row in rows:
        for name in _DESCRIPTIVE:
            value = row.get(name)
            if isinstance(value, str):
                row[name] = utf8_text(value)
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except Exception as exc:
        log.warning("%s: %d rows refused (%s): each alone", batch, len(rows), exc)
    tables: list[pa.Table] = []
    each_alone_sync(
        batch, rows, lambda row: tables.append(pa.Table.from_pylist([row], schema=schema))
    )
    return pa.concat_tables(tables) if tables else schema.empty_table()


def encode_segment(table: pa.Table) -> bytes:
    """A live segment: LZ4 (cheap to write; compaction recompresses with Zstandard), statistics
    on what readers filter by."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression="lz4",
        row_group_size=64 * 1024,
        # Topics plain: hashing each one cost more than LZ4 saves (compaction dictionary-codes
        # them with Zstandard).
        use_dictionary=["tenant", "client_id", "outcome", "node", "event", "quota", "rule"],
        # Not client_id: its statistics cost as much as the rest of the encoding, and a live
        # segment is one row group, skipped (or not) by tenant and time already.
        write_statistics=["tenant", "ts"],
    )
    data: bytes = sink.getvalue().to_pybytes()  # pyarrow is untyped
    return data


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _hour_folder(hour: datetime) -> str:
    return hour_partition(_ms(hour))


@dataclass
class Marker:
    segments: list[str] = field(default_factory=list)  # live segments whose rows are in parts
    parts: list[str] = field(default_factory=list)  # the tenant files that hold them
    rounds: int = 0  # compactions so far: the next part's number (never reused)

    def encode(self) -> bytes:
        return json.dumps(
            {"segments": self.segments, "parts": self.parts, "rounds": self.rounds}
        ).encode()

    @classmethod
    def decode(cls, body: bytes) -> Marker:
        data = json.loads(body)
        parts = list(data.get("parts", []))
        rounds = int(data.get("rounds", len({p.rsplit("/", 1)[1] for p in parts})))
        return cls(list(data.get("segments", [])), parts, rounds)


def _marker(store: Any, stream: str, hour: datetime, keys: Iterable[str]) -> Marker | None:
    key = f"{live_prefix(stream)}/{_hour_folder(hour)}/{COMPACTED_MARKER}"
    if key not in keys:
        return None
    try:
        return Marker.decode(store.get(key))
    except ObjectNotFound:
        return None


def journey_files(
    store: Any, stream: str, tenant: str, start: datetime, end: datetime
) -> list[tuple[str, bool]]:
    """The objects holding `tenant`'s rows of `stream` in [start, end): (key, shared) pairs,
    `shared` for live segments (every tenant of a broker: filter by tenant when reading)."""
    files: list[tuple[str, bool]] = []
    mine = f"{tenant_prefix(stream, tenant)}/"
    for day in sorted({h.date() for h in hours_between(start, end)}):
        live_keys = store.list(f"{live_prefix(stream)}/date={day.isoformat()}/")
        # Parts a marker names may be gone since (retention): only those still there count.
        present = set(store.list(f"{mine}date={day.isoformat()}/"))
        by_hour: dict[str, list[str]] = {}
        for key in live_keys:
            by_hour.setdefault(key.rsplit("/", 1)[0], []).append(key)
        for hour in hours_between(start, end):
            if hour.date() != day:
                continue
            folder = f"{live_prefix(stream)}/{_hour_folder(hour)}"
            keys = by_hour.get(folder, [])
            marker = _marker(store, stream, hour, keys)
            done = set(marker.segments) if marker else set()
            if marker:
                files.extend((k, False) for k in marker.parts if k in present)
            files.extend((k, True) for k in keys if k.endswith(".parquet") and k not in done)
    return files


def read_rows(store: Any, stream: str, tenant: str, start: datetime, end: datetime) -> pa.Table:
    """`tenant`'s rows of [start, end), for readers without DuckDB at hand (tests, tools)."""
    tables = []
    lo = pa.scalar(_ms(start), pa.timestamp("ms", tz="UTC"))
    hi = pa.scalar(_ms(end), pa.timestamp("ms", tz="UTC"))
    for key, _shared in journey_files(store, stream, tenant, start, end):
        try:
            table = conform(pq.read_table(io.BytesIO(store.get(key))), stream)
        except ObjectNotFound:  # compacted meanwhile: read again
            return read_rows(store, stream, tenant, start, end)
        mask = pc.and_(
            pc.equal(table["tenant"], tenant),
            pc.and_(pc.greater_equal(table["ts"], lo), pc.less(table["ts"], hi)),
        )
        tables.append(table.filter(mask))
    if not tables:
        return SCHEMAS[stream].empty_table()
    return pa.concat_tables(tables)


# -- compaction ----------------------------------------------------------------------------------


def compact_hour(store: Any, stream: str, hour: datetime, *, merge: bool = False) -> int:
    """Move the hour's live segments into per-tenant parts (one more part per tenant each
    round); with `merge` (a closed hour), rewrite each tenant's parts and the new segments as one
    part. Returns the segments moved. Parts are written first, then the marker naming them, then
    what they replace is deleted: a reader sees every row once at every step (one that lists
    before the marker and reads after a deletion reads again: `ObjectNotFound`)."""
    folder = f"{live_prefix(stream)}/{_hour_folder(hour)}"
    keys = store.list(folder + "/")
    marker = _marker(store, stream, hour, keys) or Marker()
    done = set(marker.segments)
    todo = [k for k in keys if k.endswith(".parquet") and k not in done]
    tenants_of: dict[str, list[str]] = {}
    for part in marker.parts:
        tenants_of.setdefault(part.split("/")[2], []).append(part)
    merging = merge and any(len(parts) > 1 for parts in tenants_of.values())
    if not todo and not merging:
        return 0
    inputs = todo + (list(marker.parts) if merge else [])
    tables = [conform(pq.read_table(io.BytesIO(store.get(k))), stream) for k in inputs]
    rows = pa.concat_tables(tables).sort_by([("tenant", "ascending"), ("ts", "ascending")])
    round_ = marker.rounds
    parts = []
    for tenant in pc.unique(rows["tenant"]).to_pylist():
        mine = rows.filter(pc.equal(rows["tenant"], tenant))
        key = f"{tenant_prefix(stream, tenant)}/{_hour_folder(hour)}/part-{round_:04d}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(mine, sink, compression="zstd", row_group_size=256 * 1024)
        store.put(key, sink.getvalue().to_pybytes())
        parts.append(key)
    replaced = list(marker.parts) if merge else []
    marker.segments.extend(todo)
    marker.parts = parts if merge else marker.parts + parts
    marker.rounds = round_ + 1
    store.put(f"{folder}/{COMPACTED_MARKER}", marker.encode())
    for key in [*todo, *replaced]:
        store.delete(key)
    log.info(
        "journey: compacted %s: %d segments%s, %d rows",
        folder,
        len(todo),
        f" and {len(replaced)} parts" if replaced else "",
        rows.num_rows,
    )
    return len(todo)


# An open hour is compacted once this many segments gathered (about 5 minutes of one broker's):
# the current hour is what a query reads the most files of.
OPEN_HOUR_SEGMENTS = 150


def compact_due(store: Any, now: datetime, grace: timedelta = timedelta(minutes=5)) -> int:
    """Compact every hour with live segments: a closed hour (ended at least `grace` ago) into
    one part per tenant, the open hours once `OPEN_HOUR_SEGMENTS` have gathered."""
    moved = 0
    for stream in STREAMS:
        segments: dict[datetime, int] = {}
        marked: set[datetime] = set()
        for key in store.list(f"{live_prefix(stream)}/"):
            hour = key_hour(key)
            if hour is None:
                continue
            if key.endswith(".parquet"):
                segments[hour] = segments.get(hour, 0) + 1
            elif key.endswith("/" + COMPACTED_MARKER) and hour + HOUR + grace + HOUR > now:
                marked.add(hour)  # closed lately: its parts may still want merging
        for hour in sorted(set(segments) | marked):
            closed = hour + HOUR + grace <= now
            if closed:
                moved += compact_hour(store, stream, hour, merge=True)
            elif segments.get(hour, 0) >= OPEN_HOUR_SEGMENTS:
                moved += compact_hour(store, stream, hour)
    return moved


# -- retention -----------------------------------------------------------------------------------


def delete_before(store: Any, tenant: str, before: datetime) -> int:
    """Delete `tenant`'s whole hour folders that end at or before `before`; returns how many
    objects went. Live segments (shared by tenants) are never deleted here: they are compacted
    within the hour after theirs closes, and their tenant files then expire with the rest."""
    deleted = 0
    for stream in STREAMS:
        for key in store.list(f"{tenant_prefix(stream, tenant)}/"):
            hour = key_hour(key)
            if hour is not None and hour + HOUR <= before:
                store.delete(key)
                deleted += 1
    return deleted


def delete_live_before(store: Any, before: datetime) -> int:
    """Delete live folders of hours ending before `before` (and their markers): what is left
    there after compaction is the marker, and segments no tenant may keep any longer."""
    deleted = 0
    for stream in STREAMS:
        for key in store.list(f"{live_prefix(stream)}/"):
            hour = key_hour(key)
            if hour is not None and hour + HOUR <= before:
                store.delete(key)
                deleted += 1
    return deleted


def journey_tenants(store: Any) -> set[str]:
    """Tenants with compacted journey files."""
    tenants = set()
    for stream in STREAMS:
        for key in store.list(f"{JOURNEY_PREFIX}/{stream}/tenant="):
            tenants.add(key.split("/")[2].removeprefix("tenant="))
    return tenants
