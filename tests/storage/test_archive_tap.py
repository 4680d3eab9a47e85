"""The archive tap's batches: every row tapped reaches the object store, whatever the moment the
broker stops.

Found by `bench.archive`: at ~50,000 msg/s a second of rows went missing from some runs. The
stop came while the periodic flush's batch was still encoding; with nothing new buffered, stop()
neither waited for it nor uploaded what it produced. A slow encoder makes that moment certain.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow.parquet as pq

from bench.fuzz import RecordingTransport
from common.archive.schema import EVENT_PUBLISH
from common.stores.object_store import LocalObjectStore
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.storage.archive_hook import ArchiveTap
from data_plane.storage.parquet_archive import ParquetArchiveWriter


class SlowEncodingWriter(ParquetArchiveWriter):
    """Encodes like the real writer, after a pause long enough for stop() to arrive mid-batch."""

    def __init__(self, *args, delay: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.delay = delay
        self.encoding = threading.Event()

    def add(self, *args, **kwargs) -> int:
        self.encoding.set()
        time.sleep(self.delay)
        return super().add(*args, **kwargs)


def _archived_publishes(root) -> int:
    total = 0
    for path in (root / "archive").rglob("*.parquet"):
        events = pq.read_table(path, columns=["event"])["event"].to_pylist()
        total += events.count(EVENT_PUBLISH)
    return total


def _publish(tap: ArchiveTap, index: int) -> None:
    message = Message(f"t/{index}", b"x" * 100, 1, False, tenant="acme", publisher="c1", device="d")
    tap.record(message)  # as Broker.publish does through its Archive port


def test_stop_during_the_periodic_batchs_encoding_still_uploads_it(tmp_path):
    async def scenario() -> None:
        writer = SlowEncodingWriter(LocalObjectStore(tmp_path), delay=0.5)
        tap = ArchiveTap(writer, interval=0.05)
        tap.listen(Hooks())
        tap.start()
        for index in range(1000):
            _publish(tap, index)
        # The periodic flush has taken every row and the builder is encoding them: nothing new
        # is buffered when the broker is told to stop.
        await asyncio.to_thread(writer.encoding.wait, 5)
        assert not len(tap._columns)
        await tap.stop()

    asyncio.run(scenario())
    assert _archived_publishes(tmp_path) == 1000


def test_rows_tapped_while_batches_encode_and_at_stop_all_arrive(tmp_path):
    async def scenario() -> None:
        writer = SlowEncodingWriter(LocalObjectStore(tmp_path), delay=0.03)
        tap = ArchiveTap(writer, interval=0.01)
        tap.start()
        for index in range(3000):
            _publish(tap, index)
            if index % 100 == 0:
                await asyncio.sleep(0.005)
        await tap.stop()

    asyncio.run(scenario())
    assert _archived_publishes(tmp_path) == 3000


def test_payloads_survive_reused_buffers_and_the_brokers_own_are_left_out(tmp_path):
    """Hand-offs reuse the payload buffers: every archived payload is still the one published,
    across many hand-offs; the broker's own messages (`$` client ids) are not archived."""

    async def scenario() -> None:
        tap = ArchiveTap(ParquetArchiveWriter(LocalObjectStore(tmp_path)), interval=0.2)
        tap.start()
        for index in range(20_000):
            payload = f"{index}:".encode() * (1 + index % 7)
            message = Message(f"t/{index}", payload, 0, False, tenant="acme", publisher="c1")
            tap.record(message)
            if index % 500 == 0:
                tap.record(Message("$SYS/x", b"sys", 0, False, publisher="$SYS"))
                await asyncio.sleep(0.01)  # ticks: hand-offs of ~2,000 rows
        await tap.stop()

    asyncio.run(scenario())
    rows = []
    for path in sorted((tmp_path / "archive").rglob("*.parquet")):
        rows += pq.read_table(path, columns=["client_id", "topic", "payload"]).to_pylist()
    assert len(rows) == 20_000
    assert all(row["client_id"] == "c1" for row in rows)
    for row in rows:
        index = int(row["topic"][2:])
        assert row["payload"] == f"{index}:".encode() * (1 + index % 7)


def test_the_first_batch_of_live_traffic_loads_nothing(tmp_path):
    """Building the tap warms the encoder up: pyarrow's first conversion of Python objects
    imports pandas (~0.2 s of CPU and ~30,000 objects); that belongs to start-up, before the
    broker freezes what it loaded, not to the first batch of live traffic. A fresh interpreter,
    so that nothing an earlier test loaded hides it."""
    script = textwrap.dedent(
        f"""
        import sys
        from common.stores.object_store import LocalObjectStore
        from data_plane.broker.message import Message
        from data_plane.storage.archive_hook import ArchiveTap
        from data_plane.storage.archive_columns import publish_columns
        from data_plane.storage.parquet_archive import ParquetArchiveWriter

        writer = ParquetArchiveWriter(LocalObjectStore({str(tmp_path)!r}))
        tap = ArchiveTap(writer, enabled_for=lambda tenant: tenant != "off")
        loaded = set(sys.modules)
        messages = [
            (1.7e9 + i, Message.from_publish(t, "c1", "t/1", b"x" * 100, 1, False, {{}}, "d"))
            for i, t in enumerate(["acme", "off", "acme"])
        ]
        event = {{"event": "client.connected", "tenant": "acme", "ts": 0, "client_id": "c1"}}
        assert writer.encode(publish_columns(messages), [event], tap.enabled_for) == 3
        print(sorted(set(sys.modules) - loaded))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_one_batch_never_gives_a_row_another_connections_publisher(tmp_path):
    """The tap records who published once per connection and batch, and an index per message.
    From the attacker's side: two tenants whose devices use the same client id, device name and
    topics publish interleaved in one batch; one reconnects mid-batch, the other's client id is
    taken over by a second connection, and an abrupt close sends a will (a message without a
    connection). Every row keeps its own publisher's tenant, client id and username."""
    from common.mqtt.codec import encode
    from common.mqtt.packets import MQTT_3_1_1, Connect, Publish, Will
    from data_plane.broker.broker import Broker
    from data_plane.broker.connection import MQTTConnection
    from data_plane.broker.ports import Ports
    from data_plane.config import BrokerConfig
    from data_plane.tenancy.static import StaticAuthenticator

    device = {"password": "p", "client_ids": "any"}
    tenants = {name: {"devices": {"d": dict(device)}} for name in ("acme", "evil")}
    sent: list[tuple[str, str]] = []  # (tenant, payload) in publish order

    async def scenario() -> None:
        tap = ArchiveTap(ParquetArchiveWriter(LocalObjectStore(tmp_path)))
        broker = Broker(BrokerConfig(), StaticAuthenticator(tenants), Ports(archive=tap))
        tap.listen(broker.hooks)  # not started: no hand-off, every row in one batch

        async def connect(tenant: str, will: Will | None = None) -> MQTTConnection:
            conn = MQTTConnection(broker)
            conn.connection_made(RecordingTransport())  # the broker's writes: not under test
            packet = Connect("same-id", username=f"{tenant}/d", password=b"p", will=will)
            conn.data_received(encode(packet, MQTT_3_1_1))
            for _ in range(100):
                if conn.session is not None:
                    return conn
                await asyncio.sleep(0.01)
            raise AssertionError(f"{tenant}: no CONNACK")

        def publish(conn: MQTTConnection, tenant: str, n: int) -> None:
            payload = f"{tenant}:{n}"
            conn.data_received(encode(Publish("t/same", payload.encode(), 0), MQTT_3_1_1))
            sent.append((tenant, payload))

        acme = await connect("acme", Will("t/same", b"acme:will"))
        evil = await connect("evil")
        for n in range(50):
            publish(acme if n % 2 else evil, "acme" if n % 2 else "evil", n)
        acme.connection_lost(None)  # abrupt: its will is published, and it reconnects
        sent.append(("acme", "acme:will"))
        await asyncio.sleep(0.05)
        acme = await connect("acme")
        taker = await connect("evil")  # takes "same-id" over from the first evil connection
        for n in range(50, 100):
            publish(acme if n % 2 else taker, "acme" if n % 2 else "evil", n)
        assert len(tap._columns) == len(sent)  # one batch
        await tap.stop()

    asyncio.run(scenario())
    rows = []
    for path in sorted((tmp_path / "archive").rglob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    published = [r for r in rows if r["event"] == EVENT_PUBLISH]
    assert sorted(r["payload"].decode() for r in published) == sorted(p for _, p in sent)
    for row in published:
        tenant = row["payload"].decode().split(":")[0]
        assert (row["tenant"], row["client_id"], row["username"], row["topic"]) == (
            tenant,
            "same-id",
            f"{tenant}/d",
            "t/same",
        ), row
    assert {r["tenant"] for r in published} == {"acme", "evil"}


def test_the_table_of_publishers_keys_by_connection_and_by_value_without_one():
    """One row per connection (its `Origin`, by identity) and, for messages without one, per
    (tenant, client id, device): equal client ids in two tenants never share a row."""
    from data_plane.broker.message import Origin
    from data_plane.storage.archive_columns import PublishColumns
    from data_plane.storage.archive_rows import publish_rows

    first, again = Origin("acme", "c1", "d"), Origin("acme", "c1", "d")  # a reconnection
    evil = Origin("evil", "c1", "d")
    sent = []
    for n in range(6):
        for tenant, origin in (("acme", first), ("evil", evil), ("acme", again)):
            sent.append(
                Message.from_publish(tenant, "c1", "t", b"%d" % n, 0, False, {}, "d", origin)
            )
        sent.append(Message("t", b"will", 0, False, publisher="c1", tenant="evil", device="d"))
        sent.append(Message("t", b"will", 0, False, publisher="c1", tenant="acme", device="d"))
    columns = PublishColumns()
    record = columns.recorder()
    for message in sent:
        record(message)
    assert sorted(columns.publishers) == sorted(
        [("acme", "c1", "d"), ("evil", "c1", "d"), ("acme", "c1", "d")]
        + [("evil", "c1", "d"), ("acme", "c1", "d")]
    )
    rows = publish_rows([(1.7e9, m) for m in sent]).to_pylist()
    assert [(r["tenant"], r["client_id"], r["username"]) for r in rows] == [
        (m.tenant, m.publisher, f"{m.tenant}/d") for m in sent
    ]


class SlowSealWriter(ParquetArchiveWriter):
    """Closes segments slowly (a large one, a busy core); records each batch's size."""

    def __init__(self, *args, delay: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.delay = delay
        self.batches: list[int] = []

    def add(self, columns, *args, **kwargs) -> int:
        self.batches.append(len(columns))
        return super().add(columns, *args, **kwargs)

    def seal(self) -> int:
        time.sleep(self.delay)
        return super().seal()


def test_hand_offs_go_on_while_segments_are_sealed(tmp_path, monkeypatch):
    """The periodic seal never holds the next hand-offs back: rows are handed over in batches of
    about `HANDOFF_ROWS` while the builder closes segments. (Waiting for the seal let 98,000 rows
    and 100 MiB of payloads pile up at 120,000 msg/s: buffers too large to reuse, cold memory,
    a page fault every few messages on the event loop.)"""
    from data_plane.storage import archive_hook

    monkeypatch.setattr(archive_hook, "HANDOFF_ROWS", 300)
    monkeypatch.setattr(archive_hook, "MAX_QUEUED_BATCHES", 1000, raising=False)

    writer = SlowSealWriter(LocalObjectStore(tmp_path), delay=0.25)

    async def scenario() -> int:
        tap = ArchiveTap(writer, interval=0.3)
        tap.start()
        deadline = time.monotonic() + 1.5
        index = 0
        while time.monotonic() < deadline:
            for _ in range(100):
                _publish(tap, index)
                index += 1
            await asyncio.sleep(0.01)
        await tap.stop()
        return index

    published = asyncio.run(scenario())
    assert _archived_publishes(tmp_path) == published
    # Each tick (20 ms) adds about 200 rows; a hand-off happens at the first tick past 300.
    # Waiting for each 0.25 s seal would let ~2,500 gather. The last batch is what stop() found.
    assert len(writer.batches) > 5 and max(writer.batches[:-1]) < 1000, writer.batches


def test_a_full_batch_is_handed_over_without_waiting_for_a_tick(tmp_path, monkeypatch):
    """One iteration of a busy loop can route tens of thousands of messages before any timer
    runs: the recorder hands a batch over as it reaches `HANDOFF_ROWS`."""
    from data_plane.storage import archive_hook

    monkeypatch.setattr(archive_hook, "HANDOFF_ROWS", 1000)
    writer = SlowSealWriter(LocalObjectStore(tmp_path), delay=0)

    async def scenario() -> None:
        tap = ArchiveTap(writer, interval=60)
        tap.start()
        for index in range(3500):  # no await: no tick can run
            _publish(tap, index)
        assert tap._queued == 3  # handed over (the worker thread may already be writing them)
        assert len(tap._columns) == 500
        await tap.stop()

    asyncio.run(scenario())
    assert writer.batches == [1000, 1000, 1000, 500]
    assert _archived_publishes(tmp_path) == 3500
