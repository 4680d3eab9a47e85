"""What the session store reads and writes: a queued message, a stored session, the states of a
delivery, and the error a write fails with (`data_plane.storage.session_store`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from data_plane.broker.ports import WriteRefused

QUEUED, SENT, RECEIVED = 0, 1, 2  # RECEIVED: PUBREC seen, PUBREL sent (QoS 2)


class StoreUnavailable(RuntimeError):
    """The database did not take a write; the broker answers with a failure reason code."""


class StoreRefused(StoreUnavailable, WriteRefused):
    """The database refused this write alone, when a group commit that held it failed and its
    writes were tried again one at a time (the others took effect)."""


@dataclass(slots=True)
class QueuedMessage:
    seq: int
    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    properties: dict[str, object] = field(default_factory=dict)
    expires_at: datetime | None = None
    packet_id: int | None = None
    state: int = QUEUED
    object_key: str = ""


@dataclass(slots=True)
class StoredSession:
    tenant_id: int
    client_id: str
    expiry_interval: int
    expires_at: datetime | None
    subscriptions: list[dict[str, object]]
    will: dict[str, object] | None
    last_seq: int
    inbound_qos2: list[int] = field(default_factory=list)
