"""Durable QoS 1 enqueue and drain on the local Postgres: the session store alone, as the broker
uses it (group commit with COPY; range reads; range deletes).

    .venv/bin/python -m bench.durable [--messages 50000] [--sessions 100] [--burst 200]

Prints messages/s enqueued (every future awaited = every copy committed), the commit batch sizes,
drain messages/s, and Postgres CPU-seconds beside them. Uses the embedded cluster (or
DATABASE_URL) and a scratch tenant it removes afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

import psycopg
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from data_plane.storage.session_store import QueuedMessage, SessionStore


def postgres_cpu_seconds() -> float:
    """CPU of every postgres process (backends included)."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if "(postgres)" in text:
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


async def main(messages: int, sessions: int, payload: int, burst: int) -> None:
    dsn = os.environ.get("DATABASE_URL")
    if not dsn:
        from common.runtime import embedded

        dsn = embedded.postgres_url()
    with psycopg.connect(dsn, autocommit=True) as conn:
        plan = conn.execute(f"SELECT id FROM {tables.PLAN} LIMIT 1").fetchone()
        if plan is None:
            conn.execute(
                f"INSERT INTO {tables.PLAN} (slug, name, monthly_price_cents,"
                " price_per_million_messages_cents, max_connections, max_publish_rate,"
                " max_inbound_bytes_rate, max_outbound_bytes_rate, max_message_size,"
                " max_subscriptions_per_client, max_queued_messages,"
                " max_retained_messages, max_session_expiry, max_keepalive) VALUES"
                " ('bench', 'Bench', 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)"
            )
            plan = conn.execute(f"SELECT id FROM {tables.PLAN} LIMIT 1").fetchone()
        tenant_id = conn.execute(
            f"INSERT INTO {tables.TENANT} (slug, name, status, plan_id, quota_overrides, acl_default,"
            " archive_enabled, created_at) VALUES (%s, 'bench', 'active', %s, '{}', 'allow', false,"
            " now()) RETURNING id",
            (f"bench-{os.getpid()}", plan[0]),
        ).fetchone()[0]
    body = b"x" * payload
    try:
        async with AsyncConnectionPool(dsn, min_size=2, max_size=4, open=False) as pool:
            await pool.open(wait=True)
            store = SessionStore(pool)
            store.start()
            cpu = postgres_cpu_seconds()
            started = time.perf_counter()
            futures = []
            for i in range(messages):  # publishes arrive in bursts, as from many connections
                futures.append(
                    store.enqueue(
                        tenant_id,
                        f"c{i % sessions}",
                        QueuedMessage(seq=i // sessions + 1, topic="t", payload=body, qos=1),
                    )
                )
                if i % burst == burst - 1:
                    await asyncio.sleep(0)
            await asyncio.gather(*futures)
            enqueue_s = time.perf_counter() - started
            enqueue_cpu = postgres_cpu_seconds() - cpu
            sizes = list(store.batch_sizes)
            cpu = postgres_cpu_seconds()
            started = time.perf_counter()
            drained = 0
            for i in range(sessions):
                queue = await store.fetch(tenant_id, f"c{i}", limit=messages)
                drained += len(queue)
                await asyncio.gather(*(store.ack(tenant_id, f"c{i}", m.seq) for m in queue))
            drain_s = time.perf_counter() - started
            drain_cpu = postgres_cpu_seconds() - cpu
            await store.stop()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                f"DELETE FROM {tables.MQTT_QUEUED_MESSAGE} WHERE tenant_id = %s", (tenant_id,)
            )
            conn.execute(f"DELETE FROM {tables.TENANT} WHERE id = %s", (tenant_id,))
    print(
        f"enqueue: {messages / enqueue_s:,.0f} msg/s ({messages} x {payload} B into {sessions}"
        f" sessions), {len(sizes)} commits, batch size median {statistics.median(sizes):,.0f}"
        f" max {max(sizes):,}, Postgres CPU {enqueue_cpu:.2f} s"
    )
    print(
        f"drain:   {drained / drain_s:,.0f} msg/s (range read + acknowledgements),"
        f" Postgres CPU {drain_cpu:.2f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--payload", type=int, default=1024)
    parser.add_argument("--burst", type=int, default=200, help="enqueues per event-loop turn")
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.sessions, args.payload, args.burst))
