"""Which archive columns a rule reads, from its AST: `CompiledRule.archive_columns`, so that a
reader (the Spark jobs) may prune the rest (Parquet column projection). Exact or a superset:
`*` and FOREACH without DO read every column.
"""

from __future__ import annotations

from typing import Any

from common.archive.schema import ARCHIVE_COLUMNS
from common.rules import functions as funcs
from common.rules.parser import Statement

_PUB_PROPS = (
    "user_properties",
    "payload_format",
    "content_type",
    "message_expiry",
    "response_topic",
    "correlation_data",
)
# Rule column (or context function) -> the archive columns it is computed from.
COLUMN_SOURCES: dict[str, tuple[str, ...]] = {
    "event": ("event",),
    "id": ("ts", "client_id", "topic", "payload"),
    "msgid": ("ts", "client_id", "topic", "payload"),
    "clientid": ("client_id",),
    "username": ("username",),
    "topic": ("topic",),
    "qos": ("qos",),
    "payload": ("payload",),
    "flags": ("retain",),
    "flag": ("retain",),
    "retain": ("retain",),
    "timestamp": ("ts",),
    "publish_received_at": ("ts",),
    "connected_at": ("ts",),
    "disconnected_at": ("ts",),
    "peerhost": ("peer",),
    "clientip": ("peer",),
    "peername": ("peer",),
    "pub_props": _PUB_PROPS,
    "user_properties": ("user_properties",),
    "payload_format": ("payload_format",),
    "content_type": ("content_type",),
    "message_expiry": ("message_expiry",),
    "response_topic": ("response_topic",),
    "reason": ("reason",),
    "proto_ver": ("proto_ver",),
    "keepalive": ("keepalive",),
    "clean_start": ("clean_start",),
    "expiry_interval": ("session_expiry",),
}


def columns_read(statement: Statement) -> tuple[str, ...]:
    """The archive columns evaluating `statement` may touch, in the archive's order."""
    needed = {"event", "topic"}  # FROM
    everything = False

    def visit(node: Any) -> None:
        nonlocal everything
        if isinstance(node, tuple) and node:
            kind = node[0]
            if kind == "star":
                everything = True
                return
            if kind == "var":
                needed.update(COLUMN_SOURCES.get(node[1], ()))
            elif kind == "fun" and node[1] in funcs.CONTEXT_FUNCTIONS:
                needed.update(COLUMN_SOURCES.get(node[1], ()))
            for child in node[1:]:
                visit(child)
        elif isinstance(node, list):
            for child in node:
                visit(child)

    for part in (statement.fields, statement.do, statement.incase, statement.where):
        visit(part)
    if statement.foreach and not statement.do:
        everything = True  # each output carries every column
    if everything:
        return ARCHIVE_COLUMNS
    return tuple(column for column in ARCHIVE_COLUMNS if column in needed)
