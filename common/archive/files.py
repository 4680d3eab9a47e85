"""Reading and compacting the message archive (layout and marker protocol: `archive_schema`).

Readers ask for (tenant, time range) and get exactly the rows in it, whichever form each hour is
in: the live segments of all tenants (filtered here), the compacted per-tenant history, and the
version 1 NDJSON segments. `archive_files` lists what to read (for a Spark or DuckDB job that
reads the files itself); `read_archive` reads it into one pyarrow Table.

`compact_hour` turns a closed hour's live segments into per-tenant history. Each step is safe to
interrupt and re-run (see `compact_hour`); nothing is read twice or lost.

pyarrow only: no Django, no broker code.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.archive.schema import (
    ARCHIVE_PREFIX,
    ARCHIVE_SCHEMA,
    COMPACTED_MARKER,
    HISTORY_SCHEMA,
    LIVE_PREFIX,
    MESSAGE_ID,
    history_part_key,
    live_hour_prefix,
    message_ids,
    read_ndjson_segment,
)
from common.archive.shredding import PAYLOAD_FIELDS, shred
from common.stores.object_store import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
HOUR_MS = 3_600_000
# Columns worth a dictionary: few distinct values per file. Payloads and correlation data are not.
DICTIONARY_COLUMNS = ["event", "tenant", "client_id", "username", "topic", "content_type", "peer"]
# Min/max statistics where a reader prunes on them (not on payloads: costly, never useful).
STATISTICS_COLUMNS = ["event", "tenant", "ts", "client_id", "username", "topic", "qos"]
# Rows per row group of a history part: a reader's task reads whole groups, so groups of this size
# spread even one hour of one tenant over every core (1M-row groups made an hour one task).
HISTORY_ROW_GROUP = 131_072
HISTORY_PART_BYTES = 256 * 1024 * 1024  # a history part closes past this size
COMPACTION_BUFFER_BYTES = 128 * 1024 * 1024  # rows held in memory across tenants while compacting
# A history part holds HISTORY_SCHEMA and its payloads' common fields as typed columns
# (`payload_fields`, a struct whose fields vary by part: `common.archive.shredding`). Readers that
# want the rows (`read_file_with_ids`, `decode_parquet`) conform them and leave it out.


# -- encoding ------------------------------------------------------------------------------------


def encode_parquet(
    table: pa.Table, *, compression: str = "zstd", row_group_size: int | None = None
) -> bytes:
    """One Parquet file of archive rows, as bytes."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression=compression,
        use_dictionary=DICTIONARY_COLUMNS,
        write_statistics=STATISTICS_COLUMNS,
        row_group_size=row_group_size,
    )
    data: bytes = sink.getvalue().to_pybytes()  # pyarrow is untyped
    return data


class ParquetBytesWriter:
    """One Parquet file of archive rows built a row group at a time (`write`), as an Arrow
    buffer (`close`: the file's bytes without a copy; any object store's `put` takes it); same
    encoding options as `encode_parquet`. For writers that stream."""

    def __init__(
        self, *, compression: str | dict[str, str] = "zstd", key: str | None = None
    ) -> None:
        self.key = key  # the object it will be stored as, where decided when it is opened
        self._sink = pa.BufferOutputStream()
        self._writer = pq.ParquetWriter(
            self._sink,
            ARCHIVE_SCHEMA,
            compression=compression,
            use_dictionary=DICTIONARY_COLUMNS,
            write_statistics=STATISTICS_COLUMNS,
        )
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table)
        self.rows += table.num_rows

    def close(self) -> pa.Buffer:
        # Not `to_pybytes()`: a second-long segment of uncompressed payloads is ~100 MB, and
        # copying it into a new `bytes` cost ~0.37 us per row (cold memory, fresh pages).
        self._writer.close()
        return self._sink.getvalue()


def decode_parquet(body: bytes) -> pa.Table:
    """Archive rows from a Parquet file's bytes, in `ARCHIVE_SCHEMA` (columns a file lacks are
    null, so files from an older writer still read)."""
    table = pq.read_table(pa.BufferReader(body))
    return conform(table)


def conform(table: pa.Table) -> pa.Table:
    columns = []
    for field_ in ARCHIVE_SCHEMA:
        if field_.name in table.column_names:
            columns.append(table.column(field_.name).cast(field_.type))
        else:
            columns.append(pa.nulls(table.num_rows, field_.type))
    return pa.Table.from_arrays(columns, schema=ARCHIVE_SCHEMA)


# -- hours and the marker ------------------------------------------------------------------------


def hour_start(value: datetime | date | str, hour: int | None = None) -> datetime:
    """The UTC start of an hour: from a datetime (truncated), or a date (or `YYYY-MM-DD`) and an
    hour number."""
    if isinstance(value, str):
        value = date.fromisoformat(value) if hour is not None else datetime.fromisoformat(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{value.isoformat()} has no time zone: give UTC explicitly")
        return value.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if hour is None or not 0 <= hour <= 23:
        raise ValueError(f"hour must be 0..23, not {hour!r}")
    return datetime(value.year, value.month, value.day, hour, tzinfo=UTC)


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """The hours that overlap [start, end)."""
    hours, current = [], hour_start(start)
    while current < end:
        hours.append(current)
        current += HOUR
    return hours


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass
class Manifest:
    """The `_COMPACTED` marker: live segments compacted so far and the history parts that hold
    them (rounds: a late segment compacted after the first run adds a round)."""

    segments: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    rounds: int = 0
    rows: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "segments": self.segments,
                "parts": self.parts,
                "rounds": self.rounds,
                "rows": self.rows,
            },
            indent=1,
        ).encode()

    @classmethod
    def decode(cls, body: bytes) -> Manifest:
        data = json.loads(body)
        return cls(list(data["segments"]), list(data["parts"]), data["rounds"], data["rows"])


def read_manifest(store: ObjectStore, hour: datetime) -> Manifest | None:
    try:
        return Manifest.decode(store.get(live_hour_prefix(_ms(hour)) + COMPACTED_MARKER))
    except ObjectNotFound:
        return None


# -- what to read --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchiveFile:
    """One object to read. `shared` files (live segments) hold every tenant of a broker: filter
    by tenant when reading. `format` is `parquet` or `ndjson` (version 1, gzip'd)."""

    key: str
    format: str
    shared: bool
    hour: datetime


def archive_files(
    store: ObjectStore, start: datetime, end: datetime, tenant: str | None = None
) -> list[ArchiveFile]:
    """The objects holding the archive rows of [start, end) (of one tenant, or all), per the
    marker protocol: for each hour the history parts its marker names and the live segments it
    does not; plus version 1 segments. No object is listed twice."""
    files: list[ArchiveFile] = []
    hours = hours_between(start, end)
    live_by_hour = _group_by_hour(_list_by_date(store, LIVE_PREFIX, hours))
    if tenant is None:
        history = [k for k in store.list(f"{ARCHIVE_PREFIX}/tenant=") if k.endswith(".ndjson.gz")]
    else:
        history = _list_by_date(store, f"{ARCHIVE_PREFIX}/tenant={tenant}", hours)
    v1_by_hour = _group_by_hour(k for k in history if k.endswith(".ndjson.gz"))
    for hour in hours:
        live = live_by_hour.get(hour, [])
        manifest = None
        if any(k.endswith("/" + COMPACTED_MARKER) for k in live):
            manifest = read_manifest(store, hour)
        done = set(manifest.segments) if manifest else set()
        if manifest is not None:
            prefix = None if tenant is None else f"{ARCHIVE_PREFIX}/tenant={tenant}/"
            files.extend(
                ArchiveFile(k, "parquet", False, hour)
                for k in manifest.parts
                if prefix is None or k.startswith(prefix)
            )
        files.extend(
            ArchiveFile(k, "parquet", True, hour)
            for k in live
            if k.endswith(".parquet") and k not in done
        )
        files.extend(ArchiveFile(k, "ndjson", False, hour) for k in v1_by_hour.get(hour, []))
    return files


def _list_by_date(store: ObjectStore, base: str, hours: list[datetime]) -> list[str]:
    keys: list[str] = []
    for day in sorted({h.date() for h in hours}):
        keys.extend(store.list(f"{base}/date={day.isoformat()}/"))
    return keys


def key_hour(key: str) -> datetime | None:
    """The hour a key's `date=…/hour=…` partition names (the archive's and the journey's
    layouts); None for a key without one."""
    day = hour = None
    for part in key.split("/"):
        if part.startswith("date="):
            day = part[5:]
        elif part.startswith("hour="):
            hour = part[5:]
    if day is None or hour is None:
        return None
    try:
        return hour_start(day, int(hour))
    except ValueError:
        return None


def _group_by_hour(keys: Iterable[str]) -> dict[datetime, list[str]]:
    grouped: dict[datetime, list[str]] = {}
    for key in keys:
        moment = key_hour(key)
        if moment is not None:
            grouped.setdefault(moment, []).append(key)
    for keys_ in grouped.values():
        keys_.sort()
    return grouped


def read_file(store: ObjectStore, file: ArchiveFile) -> pa.Table:
    body = store.get(file.key)
    return read_ndjson_segment(body) if file.format == "ndjson" else decode_parquet(body)


def read_file_with_ids(store: ObjectStore, file: ArchiveFile) -> pa.Table:
    """One object's rows in `HISTORY_SCHEMA`: each with its message id, stored (history parts
    compacted with ids) or derived from the key and the row's position (archive_schema)."""
    body = store.get(file.key)
    if file.format == "ndjson":
        table, stored = read_ndjson_segment(body), None
    else:
        raw = pq.read_table(pa.BufferReader(body))
        stored = raw.column(MESSAGE_ID) if MESSAGE_ID in raw.column_names else None
        table = conform(raw)
    derived = message_ids(file.key, table.num_rows)
    ids = derived if stored is None else pc.coalesce(stored.cast(pa.string()), derived)
    return table.append_column(MESSAGE_ID, ids)


def iter_archive(
    store: ObjectStore,
    start: datetime,
    end: datetime,
    tenant: str | None = None,
    events: Iterable[str] | None = None,
    with_ids: bool = False,
) -> Iterator[pa.Table]:
    """The rows of [start, end) one file at a time, filtered by tenant, time and event (with
    each row's message id: `with_ids`)."""
    wanted = pa.array(sorted(events), pa.string()) if events is not None else None
    lo = pa.scalar(_ms(start), pa.timestamp("ms", tz="UTC"))
    hi = pa.scalar(_ms(end), pa.timestamp("ms", tz="UTC"))
    read = read_file_with_ids if with_ids else read_file
    for file in archive_files(store, start, end, tenant):
        try:
            table = read(store, file)
        except ObjectNotFound:
            if not file.shared:
                # A history part goes only with retention (its hour is past the tenant's
                # days; `forget_parts` then takes it out of the marker): nothing to read.
                continue
            # Compacted (and deleted) between listing and reading: its rows are now in parts
            # the listing did not name, so list again rather than miss them.
            raise ArchiveChanged(file.key) from None
        mask = pc.and_(pc.greater_equal(table["ts"], lo), pc.less(table["ts"], hi))
        if tenant is not None:
            mask = pc.and_(mask, pc.equal(table["tenant"], tenant))
        if wanted is not None:
            mask = pc.and_(mask, pc.is_in(table["event"], value_set=wanted))
        table = table.filter(mask)
        if table.num_rows:
            yield table


class ArchiveChanged(RuntimeError):
    """A listed object went away while reading (a compaction ran): read again."""


def read_archive(
    store: ObjectStore,
    start: datetime,
    end: datetime,
    tenant: str | None = None,
    events: Iterable[str] | None = None,
    *,
    attempts: int = 3,
) -> pa.Table:
    """Every archived row of [start, end) (one tenant's, or all), in `ARCHIVE_SCHEMA`, sorted by
    time. Retries from the listing when a compaction moves files underneath."""
    for attempt in range(attempts):
        try:
            tables = list(iter_archive(store, start, end, tenant, events))
            break
        except ArchiveChanged:
            if attempt == attempts - 1:
                raise
    if not tables:
        return ARCHIVE_SCHEMA.empty_table()
    return pa.concat_tables(tables).sort_by([("ts", "ascending")])


def forget_parts(store: ObjectStore, hour: datetime, keys: Iterable[str]) -> int:
    """Take history parts deleted by retention out of their hour's marker, so no reader lists
    them again (readers skip a named part that is gone meanwhile); returns how many it named.
    Run by one writer at a time with compaction (the control plane's archive lock)."""
    manifest = read_manifest(store, hour)
    gone = set(keys)
    if manifest is None or not gone.intersection(manifest.parts):
        return 0
    kept = [k for k in manifest.parts if k not in gone]
    named = len(manifest.parts) - len(kept)
    manifest.parts = kept
    store.put(live_hour_prefix(_ms(hour)) + COMPACTED_MARKER, manifest.encode())
    return named


# -- compaction ----------------------------------------------------------------------------------


@dataclass
class CompactionResult:
    hour: datetime
    segments: int = 0  # live segments compacted by this run
    rows: int = 0
    parts: list[str] = field(default_factory=list)
    deleted: int = 0  # live segments deleted (this run's and those an earlier run left behind)

    def as_dict(self) -> dict[str, Any]:
        return {
            "hour": self.hour.isoformat(),
            "segments": self.segments,
            "rows": self.rows,
            "parts": len(self.parts),
            "deleted": self.deleted,
        }


def compact_hour(
    store: ObjectStore, day: date | str | datetime, hour: int | None = None
) -> CompactionResult:
    """Compact one hour's live segments into per-tenant history parts.

    1. Live segments the marker already names are leftovers of a run interrupted after step 4:
       delete them. The others are this run's input (all of them, or late uploads).
    2. Read them segment by segment; each row gets its message id (from the segment's key and
       its position there: `archive_schema.message_ids`), then each tenant's rows go to its own
       part files (spooled to local disk, row groups of up to a million rows, `HISTORY_SCHEMA`),
       named by round, so a re-run of an interrupted round writes the same names again.
    3. Upload the parts.
    4. Write the marker naming the input segments and the parts (one atomic put): from here on
       readers read the parts instead of the segments.
    5. Delete the input segments.
    A crash before 4 leaves the marker as it was: readers keep reading the segments, and the
    parts written so far are unnamed leftovers the re-run overwrites.
    """
    start = hour_start(day, hour) if hour is not None else hour_start(day)
    prefix = live_hour_prefix(_ms(start))
    keys = store.list(prefix)
    manifest = read_manifest(store, start) if prefix + COMPACTED_MARKER in keys else None
    manifest = manifest or Manifest()
    done = set(manifest.segments)
    result = CompactionResult(start)
    segments = [k for k in keys if k.endswith(".parquet")]
    for key in segments:
        if key in done:
            store.delete(key)
            result.deleted += 1
    todo = [k for k in segments if k not in done]
    if not todo:
        return result
    with tempfile.TemporaryDirectory(prefix="archive-compact-") as spool:
        parts, rows = _write_parts(store, todo, start, manifest.rounds, spool)
    manifest.segments.extend(todo)
    manifest.parts.extend(parts)
    manifest.rounds += 1
    manifest.rows += rows
    store.put(prefix + COMPACTED_MARKER, manifest.encode())
    for key in todo:
        store.delete(key)
    result.segments, result.rows, result.parts = len(todo), rows, parts
    result.deleted += len(todo)
    log.info("compacted %s: %d segments, %d rows, %d parts", prefix, len(todo), rows, len(parts))
    return result


class _PartSpool:
    """One tenant's history parts of this round, on local disk until uploaded."""

    def __init__(self, tenant: str, hour_ms: int, round_: int, spool: str) -> None:
        self.tenant, self.hour_ms, self.round, self.spool = tenant, hour_ms, round_, spool
        self.number = 0
        self.writer: pq.ParquetWriter | None = None
        self.path = ""
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0
        self.done: list[tuple[str, str]] = []  # (key, local path)
        self.fields: list[str] | None = None  # the open part's typed payload fields

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.pending_bytes += table.nbytes

    def flush(self) -> None:
        if not self.pending:
            return
        table = pa.concat_tables(self.pending).sort_by([("ts", "ascending")])
        # Each payload parsed once, here (`common.archive.shredding`); the part's typed fields
        # are chosen from its first rows and kept for the whole part (one schema per file).
        fields, self.fields = shred(table["payload"].to_pylist(), fields=self.fields)
        if self.writer is None:
            schema = HISTORY_SCHEMA
            if fields is not None:
                schema = schema.append(pa.field(PAYLOAD_FIELDS, fields.type))
            handle, self.path = tempfile.mkstemp(dir=self.spool, suffix=".parquet")
            os.close(handle)
            self.writer = pq.ParquetWriter(
                self.path,
                schema,
                compression="zstd",
                use_dictionary=DICTIONARY_COLUMNS,
                write_statistics=STATISTICS_COLUMNS,
            )
        if fields is not None:
            table = table.append_column(PAYLOAD_FIELDS, fields)
        self.writer.write_table(table, row_group_size=HISTORY_ROW_GROUP)
        self.pending, self.pending_bytes = [], 0
        if os.path.getsize(self.path) >= HISTORY_PART_BYTES:
            self.close()

    def close(self) -> None:
        if self.pending:
            self.flush()
        if self.writer is not None:
            self.writer.close()
            key = history_part_key(self.tenant, self.hour_ms, self.round, self.number)
            self.done.append((key, self.path))
            self.writer, self.number, self.fields = None, self.number + 1, None


def _write_parts(
    store: ObjectStore, segments: list[str], hour: datetime, round_: int, spool: str
) -> tuple[list[str], int]:
    spools: dict[str, _PartSpool] = {}
    rows = held = 0
    for key in segments:
        table = decode_parquet(store.get(key))
        rows += table.num_rows
        # Each message keeps the id it had in its live segment (archive_schema, "Message ids").
        table = table.append_column(MESSAGE_ID, message_ids(key, table.num_rows))
        # Live segments hold their tenants' rows in arrival order, interleaved (the broker does
        # not sort them: that cost it a copy of every payload): sorted here, off the broker.
        table = table.sort_by([("tenant", "ascending"), ("ts", "ascending")])
        tenants = table["tenant"]
        bounds = pc.value_counts(tenants)  # now grouped by tenant: slice, not filter
        offset = 0
        for item in bounds:
            tenant, count = item["values"].as_py(), item["counts"].as_py()
            chunk = table.slice(offset, count)
            offset += count
            part = spools.get(tenant)
            if part is None:
                part = spools[tenant] = _PartSpool(tenant, _ms(hour), round_, spool)
            part.add(chunk)
            held += chunk.nbytes
            if part.pending_bytes >= COMPACTION_BUFFER_BYTES // 4:
                held -= part.pending_bytes
                part.flush()
        if held >= COMPACTION_BUFFER_BYTES:  # memory bound across tenants: write the largest
            for part in sorted(spools.values(), key=lambda p: -p.pending_bytes):
                held -= part.pending_bytes
                part.flush()
                if held < COMPACTION_BUFFER_BYTES // 2:
                    break
    parts = []
    for part in spools.values():
        part.close()
        for key, path in part.done:
            with open(path, "rb") as handle:
                store.put(key, handle.read())
            parts.append(key)
    return sorted(parts), rows


def hours_due(
    store: ObjectStore, now: datetime | None = None, grace: timedelta = timedelta(minutes=5)
) -> list[datetime]:
    """Closed hours (ended more than `grace` ago) with live segments still to compact or delete."""
    now = now or datetime.now(UTC)
    keys = [k for k in store.list(LIVE_PREFIX + "/") if k.endswith(".parquet")]
    return sorted(h for h in _group_by_hour(keys) if h + HOUR + grace <= now)


def compact_due(
    store: ObjectStore, now: datetime | None = None, grace: timedelta = timedelta(minutes=5)
) -> list[CompactionResult]:
    """Compact every closed hour that has live segments (the periodic task)."""
    return [compact_hour(store, hour) for hour in hours_due(store, now, grace)]


# -- what the archive stores per tenant (the storage sampler's archive bytes) -------------------


def archive_bytes_by_tenant(
    store: ObjectStore, history: dict[str, int] | None = None
) -> dict[str, int]:
    """Bytes of the object store each tenant's archive occupies now.

    - History (`archive/tenant={slug}/…`: compacted parts and version 1 segments) is the
      tenant's alone: every object's size counts in full. (Parts an interrupted compaction left
      behind count until the next run overwrites them; they are rare and short-lived.) Listed
      here in full unless the caller has the totals (`history`: the storage sampler keeps them
      incrementally, `tenants.usage.storage.HistoryIndex`).
    - Live segments hold every tenant of a broker. Those an hour's `_COMPACTED` marker names are
      already in history (and about to be deleted): not counted, so nothing counts twice. Each
      other segment's size is shared among its tenants in proportion to their rows (only the
      `tenant` column is read: it is dictionary-encoded and small).
    """
    totals = dict(history) if history is not None else history_bytes_by_tenant(store)
    live = store.sizes(f"{LIVE_PREFIX}/")
    by_hour = _group_by_hour(live)
    for hour, keys in sorted(by_hour.items()):
        done: set[str] = set()
        if any(k.endswith("/" + COMPACTED_MARKER) for k in keys):
            manifest = read_manifest(store, hour)
            done = set(manifest.segments) if manifest else set()
        for key in keys:
            if not key.endswith(".parquet") or key in done:
                continue
            try:
                body = store.get(key)
            except ObjectNotFound:  # compacted and deleted since the listing: now in history
                continue
            rows = pq.read_table(pa.BufferReader(body), columns=["tenant"]).column("tenant")
            counts = pc.value_counts(rows).to_pylist()
            total_rows = sum(c["counts"] for c in counts)
            if not total_rows:
                continue
            shares = _split(live[key], {c["values"]: c["counts"] for c in counts}, total_rows)
            for tenant, share in shares.items():
                totals[tenant] = totals.get(tenant, 0) + share
    return totals


def history_bytes_by_tenant(store: ObjectStore, start_after: str = "") -> dict[str, int]:
    """Per tenant, the bytes of its history objects (all of them: one listing of the history
    prefix, after `start_after` if given)."""
    totals: dict[str, int] = {}
    for key, size in store.sizes(f"{ARCHIVE_PREFIX}/tenant=", start_after).items():
        tenant = key.split("/", 2)[1].removeprefix("tenant=")
        totals[tenant] = totals.get(tenant, 0) + size
    return totals


def _split(size: int, rows: dict[str, int], total_rows: int) -> dict[str, int]:
    """`size` bytes shared by row counts, in whole bytes that add up to `size` exactly (the
    remainder goes to the largest shares first, ties by tenant name)."""
    shares = {t: size * n // total_rows for t, n in rows.items()}
    left = size - sum(shares.values())
    order = sorted(rows, key=lambda t: (-(size * rows[t] % total_rows), t))
    for tenant in order[:left]:
        shares[tenant] += 1
    return shares
