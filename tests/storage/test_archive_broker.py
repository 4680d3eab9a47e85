"""The archive on a real broker (Postgres, moto's S3 server): what paho publishes comes back as
Parquet rows, read with pyarrow and with DuckDB, beside the lifecycle events (for a tenant whose
history policies keep them); a tenant that turned the archive off leaves nothing; an unreachable store buffers within bounds and says so."""

import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import duckdb
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from common.archive.files import archive_files, read_archive
from common.archive.schema import (
    EVENT_CONNECTED,
    EVENT_DISCONNECTED,
    EVENT_PUBLISH,
    EVENT_SUBSCRIBED,
    EVENT_UNSUBSCRIBED,
)
from common.stores.object_store import open_object_store
from tenants.devices import services as device_services
from tenants.history.services import history_policy_create
from tenants.models import Tenant
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


def _bucket(s3_endpoint, monkeypatch, name: str, *, create: bool = True) -> str:
    bucket = f"{name}-{uuid.uuid4().hex[:10]}"
    if create:
        boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    monkeypatch.setenv("OBJECT_STORE_URL", f"s3://{bucket}/mqtt")
    return f"s3://{bucket}/mqtt"


def _window():
    now = datetime.now(UTC)
    return now - timedelta(hours=2), now + timedelta(hours=2)


def test_published_messages_and_lifecycle_events_come_back_as_parquet_rows(
    s3_endpoint, monkeypatch, tmp_path
):
    url = _bucket(s3_endpoint, monkeypatch, "archive")
    acme = tenant_services.tenant_create("acme")
    quiet = tenant_services.tenant_create("quiet")
    # acme keeps every topic and its lifecycle events; quiet asks for history but turned its
    # archive off: nothing of it is kept.
    for tenant in (acme, quiet):
        history_policy_create(tenant=tenant, topic_filter="#", days=1)
        history_policy_create(tenant=tenant, topic_filter="$events/#", days=1)
    Tenant.objects.filter(id=quiet.id).update(archive_enabled=False)
    _, acme_secret = device_services.device_create(tenant=acme, name="d", client_id_policy="any")
    _, quiet_secret = device_services.device_create(tenant=quiet, name="d", client_id_policy="any")
    process, port = start_pg_broker("--archive-interval", "0.2")
    binary = bytes(range(256)) + b"\x00\xff"
    props = Properties(PacketTypes.PUBLISH)
    props.UserProperty = [("k", "v1"), ("k", "v2"), ("unit", "°C")]
    props.ContentType = "application/octet-stream"
    props.CorrelationData = b"\x00\x01corr\xff"
    props.ResponseTopic = "replies/acme"
    props.MessageExpiryInterval = 3600
    props.PayloadFormatIndicator = 0
    sent = time.time()
    try:
        loud = Paho(port, "acme/d", acme_secret, "arch-1", keepalive=30, expiry=120)
        assert loud.subscribe("sensors/#", 1)
        loud.publish("bin/1", binary, 1, properties=props)
        for i in range(3):
            loud.publish(f"sensors/{i}", f"reading {i}", i % 3)
        loud.publish("state", b"", 0, retain=False)
        loud.publish("kept", b"retained", 1, retain=True)
        old = Paho(port, "acme/d", acme_secret, "arch-3.1.1", v5=False)
        old.publish("v311", b"\xfe\xfd", 1)
        assert len(loud.expect(3, 5)) == 3
        loud.client.unsubscribe("sensors/#")
        time.sleep(0.3)
        loud.close()
        time.sleep(0.2)
        old.close(abrupt=True)
        silent = Paho(port, "quiet/d", quiet_secret, "arch-2")
        silent.publish("private", "not archived", 1)
        silent.close()
        time.sleep(0.5)
        # An operator's `top -H` tells the archive's threads from the event loop.
        names = {p.read_text().strip() for p in Path(f"/proc/{process.pid}/task").glob("*/comm")}
        assert {"archive-build", "archive-upload"} <= names, names
    finally:
        process.terminate()  # a graceful stop encodes and uploads what is buffered
        assert process.wait(timeout=20) == 0
    store = open_object_store(url)
    keys = store.list("archive/")
    assert keys and all(k.startswith("archive/live/date=") and k.endswith(".parquet") for k in keys)
    start, end = _window()
    rows = read_archive(store, start, end).to_pylist()
    assert {r["tenant"] for r in rows} == {"acme"}  # quiet's archive is off: nothing of it
    assert read_archive(store, start, end, "quiet").num_rows == 0

    publishes = [r for r in rows if r["event"] == EVENT_PUBLISH]
    assert [(r["topic"], r["payload"], r["qos"], r["retain"]) for r in publishes] == [
        ("bin/1", binary, 1, False),
        ("sensors/0", b"reading 0", 0, False),
        ("sensors/1", b"reading 1", 1, False),
        ("sensors/2", b"reading 2", 2, False),
        ("state", b"", 0, False),
        ("kept", b"retained", 1, True),
        ("v311", b"\xfe\xfd", 1, False),
    ]
    first = publishes[0]
    assert first["user_properties"] == [
        {"key": "k", "value": "v1"},
        {"key": "k", "value": "v2"},
        {"key": "unit", "value": "°C"},
    ]
    assert first["content_type"] == "application/octet-stream"
    assert first["correlation_data"] == b"\x00\x01corr\xff"
    assert first["response_topic"] == "replies/acme"
    assert first["message_expiry"] == 3600 and first["payload_format"] == 0
    assert all(r["username"] == "acme/d" for r in rows)
    assert [r["client_id"] for r in publishes] == ["arch-1"] * 6 + ["arch-3.1.1"]
    assert publishes[1]["user_properties"] is None and publishes[1]["content_type"] is None
    for row in publishes:  # the broker's receive time, in ms UTC
        assert sent - 1 <= row["ts"].timestamp() <= time.time()

    events = [(r["event"], r["client_id"]) for r in rows if r["event"] != EVENT_PUBLISH]
    assert events == [
        (EVENT_CONNECTED, "arch-1"),
        (EVENT_SUBSCRIBED, "arch-1"),
        (EVENT_CONNECTED, "arch-3.1.1"),
        (EVENT_UNSUBSCRIBED, "arch-1"),
        (EVENT_DISCONNECTED, "arch-1"),
        (EVENT_DISCONNECTED, "arch-3.1.1"),
    ]
    by_event = {(r["event"], r["client_id"]): r for r in rows}
    connected = by_event[(EVENT_CONNECTED, "arch-1")]
    assert connected["proto_ver"] == 5 and connected["keepalive"] == 30
    assert connected["clean_start"] is True and connected["session_expiry"] == 120
    assert connected["peer"].startswith("127.0.0.1:")
    assert by_event[(EVENT_CONNECTED, "arch-3.1.1")]["proto_ver"] == 4
    assert by_event[(EVENT_SUBSCRIBED, "arch-1")]["topic"] == "sensors/#"
    assert by_event[(EVENT_SUBSCRIBED, "arch-1")]["qos"] == 1
    assert by_event[(EVENT_UNSUBSCRIBED, "arch-1")]["topic"] == "sensors/#"
    assert by_event[(EVENT_DISCONNECTED, "arch-1")]["reason"] == "normal"
    assert by_event[(EVENT_DISCONNECTED, "arch-3.1.1")]["reason"] == "tcp_closed"

    # Any Parquet reader: DuckDB over the same files, downloaded as they are.
    for file in archive_files(store, start, end):
        path = tmp_path / file.key.replace("/", "_")
        path.write_bytes(store.get(file.key))
    found = duckdb.sql(
        f"SELECT topic, payload, content_type, correlation_data, user_properties[2].value AS k2 "
        f"FROM read_parquet('{tmp_path}/*.parquet') "
        "WHERE event = 'message.publish' AND tenant = 'acme' ORDER BY ts, topic"
    ).fetchall()
    assert found[0] == ("bin/1", binary, "application/octet-stream", b"\x00\x01corr\xff", "v2")
    # Two publishes may share a millisecond: DuckDB's ORDER BY ts, topic may then swap them.
    assert sorted(row[:2] for row in found) == sorted((r["topic"], r["payload"]) for r in publishes)


def metrics(port: int) -> dict[str, float]:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("mqtt_store_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


# The usage log (Parquet, written by the broker beside this archive) is tested in
# tests/billing/test_metering_units.py.


def test_archive_buffers_while_the_object_store_is_away_and_says_so(s3_endpoint, monkeypatch):
    from tests.conftest import _free_port

    url = _bucket(s3_endpoint, monkeypatch, "late", create=False)  # every upload fails
    bucket = url.split("/")[2]
    acme = tenant_services.tenant_create("acme")
    history_policy_create(tenant=acme, topic_filter="a/#", days=1)
    history_policy_create(tenant=acme, topic_filter="$events/client_connected", days=1)
    _, secret = device_services.device_create(tenant=acme, name="d", client_id_policy="any")
    metrics_port = _free_port()
    process, port = start_pg_broker(
        "--metrics-port", str(metrics_port), "--archive-interval", "0.3"
    )
    try:
        client = Paho(port, "acme/d", secret, "arch-late")
        for i in range(4):
            client.publish("a/t", f"kept {i}", 1)
        deadline = time.monotonic() + 15
        while (
            metrics(metrics_port).get('mqtt_store_upload_failures_total{dataset="archive"}', 0) < 2
        ):
            assert time.monotonic() < deadline, metrics(metrics_port)
            time.sleep(0.2)
        figures = metrics(metrics_port)
        assert figures['mqtt_store_pending_bytes{dataset="archive"}'] > 0
        assert figures['mqtt_store_records_written_total{dataset="archive"}'] == 0

        boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)  # back
        # 4 publishes and the connect: every row buffered while the store was away lands.
        while metrics(metrics_port)['mqtt_store_records_written_total{dataset="archive"}'] < 5:
            assert time.monotonic() < deadline + 15
            time.sleep(0.2)
        figures = metrics(metrics_port)
        assert figures['mqtt_store_pending_bytes{dataset="archive"}'] == 0
        assert figures['mqtt_store_records_dropped_total{dataset="archive"}'] == 0
        client.close()
    finally:
        process.terminate()
        process.wait(timeout=20)
    store = open_object_store(os.environ["OBJECT_STORE_URL"])
    rows = read_archive(store, *_window(), "acme", [EVENT_PUBLISH]).to_pylist()
    assert [r["payload"] for r in rows] == [f"kept {i}".encode() for i in range(4)]
