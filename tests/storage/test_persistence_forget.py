"""Which session ends cost Postgres a transaction (unit level: the store is a recorder)."""

import asyncio

from data_plane.broker.session import Session
from data_plane.storage.persistence import SessionPersistence


class RecordingStore:
    def __init__(self) -> None:
        self.deleted: list[tuple[int, str]] = []

    async def delete_session(self, tenant_id: int, client_id: str) -> None:
        self.deleted.append((tenant_id, client_id))


def _session(client_id: str, expiry: int) -> Session:
    session = Session("acme", client_id, "d1", expiry_interval=expiry)
    session.tenant_id = 7
    return session


def test_only_a_session_that_was_persistent_has_rows_to_delete():
    store = RecordingStore()
    persistence = SessionPersistence(store)  # type: ignore[arg-type]
    clean, durable, shortened = _session("clean", 0), _session("durable", 60), _session("s", 60)
    for session in (clean, durable, shortened):
        persistence.attach(session)
    shortened.expiry_interval = 0  # DISCONNECT set its expiry to 0: its rows exist, they go

    async def end_all() -> None:
        for session in (clean, durable, shortened):
            persistence.forget(session)
        await persistence.drain()

    asyncio.run(end_all())
    assert store.deleted == [(7, "durable"), (7, "s")]


class SlowFirstStore:
    """Records what each write of a session's record left in the table: the first save takes
    longer than the writes queued after it (as a busy pool connection would)."""

    def __init__(self) -> None:
        self.row: dict | None = None
        self.saves = 0

    async def save_session(self, tenant_id, client_id, *, expires_at=None, **record) -> None:
        self.saves += 1
        if self.saves == 1:
            await asyncio.sleep(0.05)
        self.row = {"client_id": client_id, "expires_at": expires_at}

    async def delete_session(self, tenant_id: int, client_id: str) -> None:
        self.row = None


def test_a_sessions_record_is_written_in_the_order_its_changes_came():
    """A SUBSCRIBE's save then the DISCONNECT's: the table ends with the disconnected session
    (its expiry set), whichever write is slower; a delete after them leaves no row behind."""
    store = SlowFirstStore()
    persistence = SessionPersistence(store)  # type: ignore[arg-type]
    session = _session("parked", 3600)
    persistence.attach(session)

    async def subscribe_then_leave() -> None:
        persistence.save_later(session)  # the SUBSCRIBE
        persistence.save_later(session, disconnected=True)  # the DISCONNECT right after
        await persistence.drain()

    asyncio.run(subscribe_then_leave())
    assert store.row is not None and store.row["expires_at"] is not None

    async def save_then_end() -> None:
        store.saves = 0
        persistence.save_later(session)
        persistence.forget(session)
        await persistence.drain()

    asyncio.run(save_then_end())
    assert store.row is None
