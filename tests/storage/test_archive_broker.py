"""The archive tap on a real broker: published messages land in S3 (moto's server), partitioned
by tenant and hour, and a tenant that turned the archive off leaves nothing."""

import json
import os
import time
import uuid

import boto3
import pytest

from data_plane.storage.archive import read_segment
from common.object_store import open_object_store
from tenants import services
from tenants.models import Tenant
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


def test_published_messages_are_archived_per_tenant(s3_endpoint, monkeypatch):
    bucket = f"archive-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    monkeypatch.setenv("OBJECT_STORE_URL", f"s3://{bucket}/mqtt")
    acme = services.tenant_create("acme")
    quiet = services.tenant_create("quiet")
    Tenant.objects.filter(id=quiet.id).update(archive_enabled=False)
    _, acme_secret = services.device_create(tenant=acme, name="d", client_id_policy="any")
    _, quiet_secret = services.device_create(tenant=quiet, name="d", client_id_policy="any")
    process, port = start_pg_broker()
    try:
        loud = Paho(port, "acme/d", acme_secret, "arch-1")
        for i in range(5):
            loud.publish(f"sensors/{i}", f"reading {i}", 1)
        loud.publish("bin", b"\xff\x00", 0)
        loud.close()
        silent = Paho(port, "quiet/d", quiet_secret, "arch-2")
        silent.publish("private", "not archived", 1)
        silent.close()
    finally:
        process.terminate()  # a graceful stop closes and uploads the open segments
        assert process.wait(timeout=20) == 0
    store = open_object_store(os.environ["OBJECT_STORE_URL"])
    keys = store.list("archive/")
    assert keys and all(k.startswith("archive/tenant=acme/date=") for k in keys)
    records = [r for k in keys for r in read_segment(store.get(k))]
    assert [(r["topic"], r["payload"], r["qos"]) for r in records[:5]] == [
        (f"sensors/{i}", f"reading {i}", 1) for i in range(5)
    ]
    binary = records[5]
    assert binary["payload"] is None and binary["payload_b64"] == "/wA="
    assert all(r["tenant"] == "acme" and r["client_id"] == "arch-1" for r in records)
    assert json.dumps(records)  # plain JSON all the way


def metrics(port: int) -> dict[str, float]:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("mqtt_store_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_usage_records_reach_the_object_store_for_billing(s3_endpoint, monkeypatch):
    bucket = f"usage-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    monkeypatch.setenv("OBJECT_STORE_URL", f"s3://{bucket}")
    acme = services.tenant_create("acme")
    _, secret = services.device_create(tenant=acme, name="d", client_id_policy="any")
    process, port = start_pg_broker("--no-archive")
    try:
        client = Paho(port, "acme/d", secret, "meter-1")
        client.subscribe("m/#", 1)
        for _ in range(7):
            client.publish("m/t", b"12345", 1)
        assert len(client.expect(7, 5)) == 7
        client.close()
    finally:
        process.terminate()  # the final flush writes the current minute
        assert process.wait(timeout=20) == 0
    store = open_object_store(f"s3://{bucket}")
    keys = store.list("usage/")
    assert keys and all(k.startswith("usage/tenant=acme/date=") for k in keys)
    records = [r for k in keys for r in read_segment(store.get(k))]
    assert sum(r["messages_in"] for r in records) == 7
    assert sum(r["bytes_in"] for r in records) == 35
    assert sum(r["messages_out"] for r in records) == 7
    assert all(r["tenant"] == "acme" and r["minute"].endswith("+00:00") for r in records)


def test_archive_buffers_while_the_object_store_is_away_and_says_so(s3_endpoint, monkeypatch):
    from tests.conftest import _free_port

    bucket = f"late-{uuid.uuid4().hex[:10]}"  # does not exist yet: every upload fails
    monkeypatch.setenv("OBJECT_STORE_URL", f"s3://{bucket}")
    acme = services.tenant_create("acme")
    _, secret = services.device_create(tenant=acme, name="d", client_id_policy="any")
    metrics_port = _free_port()
    process, port = start_pg_broker(
        "--metrics-port",
        str(metrics_port),
        "--archive-interval",
        "0.3",
        "--archive-segment-age",
        "0.3",
    )
    try:
        client = Paho(port, "acme/d", secret, "arch-late")
        for i in range(4):
            client.publish("a/t", f"kept {i}", 1)
        deadline = time.monotonic() + 10
        while (
            metrics(metrics_port).get('mqtt_store_upload_failures_total{dataset="archive"}', 0) < 2
        ):
            assert time.monotonic() < deadline, metrics(metrics_port)
            time.sleep(0.2)
        figures = metrics(metrics_port)
        assert figures['mqtt_store_pending_bytes{dataset="archive"}'] > 0
        assert figures['mqtt_store_records_written_total{dataset="archive"}'] == 0

        boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)  # back
        while metrics(metrics_port)['mqtt_store_records_written_total{dataset="archive"}'] < 4:
            assert time.monotonic() < deadline + 10
            time.sleep(0.2)
        figures = metrics(metrics_port)
        assert figures['mqtt_store_pending_bytes{dataset="archive"}'] == 0
        assert figures['mqtt_store_records_dropped_total{dataset="archive"}'] == 0
        client.close()
    finally:
        process.terminate()
        process.wait(timeout=20)
    store = open_object_store(f"s3://{bucket}")
    records = [r for k in store.list("archive/") for r in read_segment(store.get(k))]
    assert [r["payload"] for r in records] == [f"kept {i}" for i in range(4)]
