"""Writes that serve several tenants at once (a group commit, a batch of upserts, one Parquet
segment of every tenant's rows), kept from failing all of them for one tenant's bad value.

Two defences, in this order (docs/architecture.md, "Batches shared by tenants"):

1. What the store would refuse is refused, or made storable, before it joins the batch
   (`common.json_input` for documents, `common.stores.postgres_text` for text, the broker's
   CONNECT for client ids longer than its tables hold).
2. When a batch still fails, and not because the store is away, its operations are written again
   one at a time, each on its own (`batch_else_each`, or `each_alone` where the batch is not a
   list of its operations): those that succeed take effect, the one that fails alone fails, with
   its reason, to its sender where it has one.

A store that is away (the connection refused or lost, the pool empty, a timeout) would refuse
each operation alone too, at the cost of one round trip each: that error ends the retry at once
and is the caller's to handle as before (keep the batch for later, or fail it).

`REFUSED` counts the operations refused alone, by batch (a name from the code, never a tenant's
value: the label stays bounded); the broker's `/metrics` shows it as
`mqtt_batch_writes_refused_total`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import psycopg

log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors that say the store is away, not that a value is bad. psycopg's OperationalError covers
# a lost connection, an empty pool (PoolTimeout), a cancelled statement and a deadlock; OSError
# a socket's or a file system's failure (timeouts and refused connections included).
AWAY: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    OSError,
)
REFUSED: Counter[str] = Counter()  # batch name -> operations refused alone
_REASON_CHARS = 300  # of a refusal's error in the log: enough to say why, never a whole payload


def is_away(exc: BaseException) -> bool:
    return isinstance(exc, AWAY)


def _refused(
    batch: str, exc: Exception, refused: Callable[[T, Exception], None] | None, item: T
) -> None:
    REFUSED[batch] += 1
    log.warning("%s: one write refused alone: %s", batch, _short(exc))
    if refused is not None:
        refused(item, exc)


async def each_alone(
    batch: str,
    items: Iterable[T],
    write: Callable[[T], Awaitable[object]],
    refused: Callable[[T, Exception], None] | None = None,
    *,
    stop_when_away: bool = True,
) -> int:
    """`write` each item on its own (its own transaction), in order; an item whose write fails
    is counted, logged and handed to `refused` with its error. With `stop_when_away` an error
    of the store being away is raised at once (the items after it not tried); without, it
    fails that item like any other. Returns how many were refused."""
    count = 0
    for item in items:
        try:
            await write(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if stop_when_away and is_away(exc):
                raise
            count += 1
            _refused(batch, exc, refused, item)
    return count


def each_alone_sync(
    batch: str,
    items: Iterable[T],
    write: Callable[[T], object],
    refused: Callable[[T, Exception], None] | None = None,
) -> int:
    """`each_alone` for blocking writes (the rules job's, the control plane's, a Parquet
    table's rows); an error of the store being away is raised at once."""
    count = 0
    for item in items:
        try:
            write(item)
        except Exception as exc:
            if is_away(exc):
                raise
            count += 1
            _refused(batch, exc, refused, item)
    return count


async def batch_else_each(
    batch: str,
    items: list[T],
    write: Callable[[list[T]], Awaitable[object]],
    refused: Callable[[T, Exception], None] | None = None,
) -> int:
    """`write(items)` (one transaction); when it fails and the store is not away, `write([item])`
    for each item (`each_alone`). Returns how many were refused alone."""
    try:
        await write(items)
        return 0
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if is_away(exc):
            raise
        log.warning("%s: a batch of %d failed (%s): each alone", batch, len(items), _short(exc))
    return await each_alone(batch, items, lambda item: write([item]), refused)


def batch_else_each_sync(
    batch: str,
    items: list[T],
    write: Callable[[list[T]], object],
    refused: Callable[[T, Exception], None] | None = None,
) -> int:
    """`batch_else_each` for blocking writes."""
    try:
        write(items)
        return 0
    except Exception as exc:
        if is_away(exc):
            raise
        log.warning("%s: a batch of %d failed (%s): each alone", batch, len(items), _short(exc))
    return each_alone_sync(batch, items, lambda item: write([item]), refused)


def _short(exc: Exception) -> str:
    return str(exc)[:_REASON_CHARS]
