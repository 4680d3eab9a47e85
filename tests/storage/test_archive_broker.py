"""The archive tap on a real broker: published messages land in S3 (moto's server), partitioned
by tenant and hour, and a tenant that turned the archive off leaves nothing."""

import json
import os
import uuid

import boto3
import pytest

from data_plane.storage.archive import read_segment
from data_plane.storage.object_store import open_object_store
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
