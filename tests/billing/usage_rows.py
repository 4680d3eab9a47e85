"""Usage-log rows written to an object store by the broker's own writer (UsageLogWriter)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from common.archive.schema import USAGE_SCHEMA
from common.stores.object_store import ObjectStore
from data_plane.storage.usage_log import UsageLogWriter

COLUMNS = [f.name for f in USAGE_SCHEMA if f.name not in ("tenant", "minute", "writer")]


def row(tenant: str, minute: datetime, writer: str = "w1", **values: int) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "minute": minute,
        "writer": writer,
        **dict.fromkeys(COLUMNS, 0),
        **values,
    }


def write_rows(store: ObjectStore, rows: list[dict[str, Any]], writer: str = "w1") -> None:
    log = UsageLogWriter(store, writer_id=writer)
    log.append(rows)
    log.write_pending()
