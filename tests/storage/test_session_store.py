"""The session store against real Postgres: group commit, ranges, restart, purge, outage."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from psycopg_pool import AsyncConnectionPool

from data_plane.storage.session_store import (
    RECEIVED,
    SENT,
    QueuedMessage,
    SessionStore,
    StoreUnavailable,
)
from tenants.tenant import services as tenant_services

pytestmark = pytest.mark.django_db(transaction=True)


def dsn() -> str:
    p = connection.get_connection_params()
    return f"host={p['host']} port={p['port']} user={p['user']} dbname={p['dbname']}"


@pytest.fixture
def tenant_id():
    return tenant_services.tenant_create("acme").id


def run(body):
    async def main():
        async with AsyncConnectionPool(dsn(), min_size=1, max_size=4, open=False) as pool:
            await pool.open(wait=True)
            store = SessionStore(pool)
            store.start()
            try:
                return await body(store)
            finally:
                await store.stop()

    return asyncio.run(main())


def message(seq: int, **kw) -> QueuedMessage:
    return QueuedMessage(seq=seq, topic=f"t/{seq}", payload=f"m{seq}".encode(), qos=1, **kw)


def test_enqueue_is_group_committed_and_read_back_in_order(tenant_id):
    async def body(store):
        await store.save_session(
            tenant_id, "c1", expiry_interval=3600, subscriptions=[{"filter": "t/#", "qos": 1}]
        )
        futures = [store.enqueue(tenant_id, "c1", message(i)) for i in range(1, 2001)]
        await asyncio.gather(*futures)
        first = await store.fetch(tenant_id, "c1", limit=10)
        rest = await store.fetch(tenant_id, "c1", after_seq=10, limit=5000)
        return store.commits, first, rest

    commits, first, rest = run(body)
    assert commits < 100  # 2,000 appends, not 2,000 transactions
    assert [m.seq for m in first] == list(range(1, 11))
    assert [m.seq for m in rest] == list(range(11, 2001))
    assert first[0].payload == b"m1" and first[0].topic == "t/1"


def test_ack_and_mark_then_reload_as_after_a_restart(tenant_id):
    async def first_life(store):
        await store.save_session(
            tenant_id,
            "c1",
            expiry_interval=60,
            subscriptions=[{"filter": "a/+", "qos": 2}],
            will={"topic": "w", "payload": "bye"},
        )
        await asyncio.gather(*(store.enqueue(tenant_id, "c1", message(i)) for i in (1, 2, 3)))
        await asyncio.gather(store.ack(tenant_id, "c1", 1), store.mark(tenant_id, "c1", 2, 7, SENT))

    async def second_life(store):
        session = await store.load_session(tenant_id, "c1")
        return session, await store.fetch(tenant_id, "c1")

    run(first_life)
    session, queue = run(second_life)
    assert session.subscriptions == [{"filter": "a/+", "qos": 2}]
    assert session.will == {"topic": "w", "payload": "bye"} and session.last_seq == 3
    assert [(m.seq, m.packet_id, m.state) for m in queue] == [(2, 7, SENT), (3, None, 0)]


def test_purge_removes_expired_sessions_and_messages(tenant_id):
    past = datetime.now(UTC) - timedelta(seconds=5)

    async def body(store):
        await store.save_session(
            tenant_id, "gone", expiry_interval=1, subscriptions=[], expires_at=past
        )
        await store.save_session(tenant_id, "kept", expiry_interval=60, subscriptions=[])
        await asyncio.gather(
            store.enqueue(tenant_id, "gone", message(1)),
            store.enqueue(tenant_id, "kept", message(1, expires_at=past)),
            store.enqueue(tenant_id, "kept", message(2)),
        )
        assert [m.seq for m in await store.fetch(tenant_id, "kept")] == [2]  # expired skipped
        purged = await store.purge_expired()
        live = [s.client_id for s in await store.live_sessions()]
        return purged, live, await store.fetch(tenant_id, "gone")

    purged, live, gone_queue = run(body)
    assert purged == (1, 1)
    assert live == ["kept"] and gone_queue == []


def test_writes_fail_clearly_when_the_database_refuses(tenant_id):
    async def body(store):
        # A queue row for a tenant that does not exist violates the foreign key: the whole
        # group fails and every waiting publisher hears about it.
        bad = store.enqueue(999_999, "c1", message(1))
        with pytest.raises(StoreUnavailable):
            await bad
        await store.enqueue(tenant_id, "c1", message(1))  # the store keeps working
        return [m.seq for m in await store.fetch(tenant_id, "c1")]

    assert run(body) == [1]


def test_the_last_mark_of_a_delivery_in_one_commit_wins(tenant_id):
    """SENT then RECEIVED (PUBREC seen, PUBREL sent) in one group commit: RECEIVED is stored.

    Were SENT kept, a restart would resend the PUBLISH (DUP, same packet id) after the client
    had already been released the message and forgotten the id: delivered twice (the QoS 2
    duplicate seen at kill -9 under load)."""

    async def body(store):
        await store.save_session(tenant_id, "c1", expiry_interval=3600, subscriptions=[])
        seqs = range(1, 201)
        await asyncio.gather(*(store.enqueue(tenant_id, "c1", message(s)) for s in seqs))
        marks = []
        for s in seqs:  # one loop turn: every mark joins the same transaction
            marks.append(store.mark(tenant_id, "c1", s, s, SENT))
            marks.append(store.mark(tenant_id, "c1", s, s, RECEIVED))
        await asyncio.gather(*marks)
        return await store.fetch(tenant_id, "c1", limit=1000)

    stored = run(body)
    assert len(stored) == 200
    assert [m.state for m in stored if m.state != RECEIVED] == []


def test_a_stream_mark_commits_with_the_writes_it_rides_with_and_never_alone(tenant_id):
    """A cluster node's last delivered stream entry (data_plane.cluster.inherit) is written in
    the transaction of the deliveries queued before it; with nothing queued, none is kept (and
    the committer is not left waiting for a batch that never wakes it)."""

    async def body(store):
        await store.save_session(tenant_id, "c1", expiry_interval=3600, subscriptions=[])
        store.stream_mark("node-x", "5-0")  # nothing queued: no mark
        await asyncio.wait_for(store.flushed(), 2)
        alone = await store.stream_mark_of("node-x")
        queued = store.enqueue(tenant_id, "c1", message(1))
        store.stream_mark("node-x", "7-1")
        await queued
        after = await store.stream_mark_of("node-x")
        later = store.enqueue(tenant_id, "c1", message(2))
        await asyncio.wait_for(store.flushed(), 2)  # a later write still wakes the committer
        await later
        await store.forget_stream_mark("node-x")
        return alone, after, await store.stream_mark_of("node-x")

    assert run(body) == (None, "7-1", None)


def test_flushed_returns_once_every_write_queued_before_it_is_committed(tenant_id):
    """A session handed to another node is read there from the database once `flushed()`
    returns. With one group commit in flight and the next group full (taken at once, with no
    wait for more writes), `flushed()` returned while that next group was still committing:
    the other node could read a queue without its last writes."""

    async def body(store):
        store.max_batch = 5
        await store.save_session(tenant_id, "c1", expiry_interval=3600, subscriptions=[])
        first = [store.enqueue(tenant_id, "c1", message(s)) for s in range(1, 6)]  # full
        await asyncio.sleep(0)  # the committer takes it: in flight
        second = [store.enqueue(tenant_id, "c1", message(s)) for s in range(6, 11)]  # full
        await store.flushed()
        stored = await store.fetch(tenant_id, "c1", limit=100)
        await asyncio.gather(*first, *second)
        return [m.seq for m in stored]

    assert run(body) == list(range(1, 11))
