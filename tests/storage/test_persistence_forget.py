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
