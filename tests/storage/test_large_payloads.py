"""Large payloads live in the object store (moto's S3 server), the queue row keeps a reference;
they survive a restart, and objects no row refers to any more are collected."""

import asyncio
import os
import time
import uuid

import boto3
import pytest
from django.db import connection
from psycopg_pool import AsyncConnectionPool

from common.stores.object_store import LocalObjectStore, open_object_store
from data_plane.storage.session_store import QueuedMessage, SessionStore
from tenants.devices import services as device_services
from tenants.models import MqttQueuedMessage
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.storage.test_durability import kill9
from tests.storage.test_session_store import dsn
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


def test_large_payload_goes_to_s3_and_survives_a_restart(s3_endpoint, monkeypatch):
    bucket = f"payloads-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    monkeypatch.setenv("OBJECT_STORE_URL", f"s3://{bucket}/mqtt")
    tenant = tenant_services.tenant_create("acme")
    tenant_services.tenant_set_quota(tenant, {"max_message_size": 1024 * 1024})
    _, sub_secret = device_services.device_create(tenant=tenant, name="sub", client_id_policy="any")
    _, pub_secret = device_services.device_create(tenant=tenant, name="pub", client_id_policy="any")
    big = os.urandom(300 * 1024)
    small = b"x" * 100
    process, port = start_pg_broker("--no-archive")
    try:
        sub = Paho(port, "acme/sub", sub_secret, "big-sub", clean=False, expiry=3600)
        sub.subscribe("files/#", 1)
        sub.close()
        other = Paho(port, "acme/sub", sub_secret, "big-sub-2", clean=False, expiry=3600)
        other.subscribe("files/#", 1)
        other.close()
        pub = Paho(port, "acme/pub", pub_secret, "big-pub")
        pub.publish("files/a", big, 1)
        pub.publish("files/b", small, 1)
        pub.close()
    finally:
        kill9(process)

    queues = MqttQueuedMessage.objects.order_by("client_id", "seq")
    rows = list(queues.values_list("client_id", "object_key", "payload"))
    assert [r[0] for r in rows] == ["big-sub", "big-sub", "big-sub-2", "big-sub-2"]
    (_, key, payload), (_, _, inline) = rows[0], rows[1]
    assert key.startswith("payloads/") and payload is None and bytes(inline) == small
    assert rows[2][1] == key  # both queues refer to one object
    store = open_object_store(os.environ["OBJECT_STORE_URL"])
    assert store.list("payloads/") == [key] and store.get(key) == big

    process, port = start_pg_broker("--no-archive")
    try:
        back = Paho(port, "acme/sub", sub_secret, "big-sub", clean=False, expiry=3600)
        assert back.session_present
        received = back.expect(2, 10)
        assert [(m.topic, m.payload) for m in received] == [("files/a", big), ("files/b", small)]
        back.close()
        deadline = time.monotonic() + 5
        mine = MqttQueuedMessage.objects.filter(client_id="big-sub")
        while mine.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not mine.exists()  # acknowledged: the rows are gone
        assert MqttQueuedMessage.objects.filter(object_key=key).count() == 1  # still needed
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_orphaned_payload_objects_are_collected(tmp_path):
    tenant_id = tenant_services.tenant_create("acme").id
    objects = LocalObjectStore(tmp_path)

    async def body():
        async with AsyncConnectionPool(dsn(), min_size=1, max_size=2, open=False) as pool:
            await pool.open(wait=True)
            store = SessionStore(pool, object_store=objects, large_payload_threshold=10)
            store.start()
            try:
                assert store.spills(11) and not store.spills(10)
                kept_key = store.new_object_key(tenant_id)
                acked_key = store.new_object_key(tenant_id)
                for seq, key in ((1, kept_key), (2, acked_key)):
                    message = QueuedMessage(seq, "t", b"p" * 20, 1, object_key=key)
                    await store.enqueue(tenant_id, "c", message)
                await store.ack(tenant_id, "c", 2)
                young = await store.collect_orphans(grace=600)
                collected = await store.collect_orphans(grace=0)
                fetched = await store.fetch(tenant_id, "c")
                return kept_key, acked_key, young, collected, fetched
            finally:
                await store.stop()

    kept_key, acked_key, young, collected, fetched = asyncio.run(body())
    assert young == 0  # within the grace period nothing is touched
    assert collected == 1
    assert objects.list("payloads/") == [kept_key]
    assert [m.payload for m in fetched] == [b"p" * 20]  # read back from the object
    connection.close()
