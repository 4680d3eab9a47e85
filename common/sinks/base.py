"""What every sink writer takes and answers: the records of one send, a result each.

A writer is handed records already in the outbox (durable), so it never raises for trouble at
the far end: it answers a `Result` per record, in the same order, saying whether the far end has
the record, and if not, why in words a tenant understands and whether trying again can help.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Record:
    """One rule output waiting in a sink's outbox."""

    id: int  # its outbox row id (ascending = order of production)
    key: str  # its ordering key (the publisher's client id unless the action says otherwise)
    body: str  # the output as the exact JSON text
    ts_ms: int  # the message's archive time (epoch ms)
    output: dict[str, Any]  # the output as a dict (templates, column mapping): any JSON value


@dataclass(frozen=True)
class Result:
    """One per record, in the records' order."""

    ok: bool
    error: str | None = None  # words a tenant understands, never a secret
    retry: bool = True  # False: permanent (dead letter at once: a row the table refuses, a 4xx)


class SinkWriter(Protocol):
    def send(self, records: Sequence[Record]) -> list[Result]:
        """Deliver `records`; a Result each, same order. Never raises for far-end trouble."""
        ...

    def check(self) -> str | None:
        """The connection test: None when the far end is reachable and writable, else words."""
        ...

    def close(self) -> None: ...


OK = Result(True)


def failed(records: Sequence[Record], error: str, retry: bool = True) -> list[Result]:
    """The same failure for every record (the far end refused or could not be reached)."""
    result = Result(False, error, retry)
    return [result for _ in records]


def setting(action: dict[str, Any], name: str) -> str:
    """A required text setting of the action; ValueError in words when it is missing."""
    value = action.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"the {action.get('type', 'sink')} action needs '{name}'")
    return value.strip()


def optional(action: dict[str, Any], name: str) -> str | None:
    value = action.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"'{name}' of the {action.get('type', 'sink')} action must be text")
    return value


def key_ordered(
    records: Sequence[Record],
    chunks: Iterable[list[int]],
    send: Callable[[list[int], list[Result]], None],
    key: Callable[[Record], str] = lambda record: record.key,
) -> list[Result]:
    """The records sent a chunk at a time by `send` (which fills in the results of the chunk it
    is given): a record whose key had an output fail, worth retrying, earlier in this send is
    not sent but waits, in that output's words — the far end never gets a key's output ahead of
    an older one, and the outbox sends them again in order. (Outputs refused for good go to the
    dead letters: the ones after them are not held.)"""
    results: list[Result] = [OK] * len(records)
    failed: dict[str, Result] = {}
    for chunk in chunks:
        going = []
        for index in chunk:
            earlier = failed.get(key(records[index]))
            if earlier is None:
                going.append(index)
            else:
                results[index] = Result(False, earlier.error, retry=True)
        if going:
            send(going, results)
        for index in going:
            if not results[index].ok and results[index].retry:
                failed.setdefault(key(records[index]), results[index])
    return results
