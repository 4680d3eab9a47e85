"""Storage GB-hours, sampled once an hour by the control plane: real MQTT traffic (retained
messages, messages queued for an offline persistent session, one spilled to S3), the archive on
moto's S3, `manage.py sample_storage` twice in the hour (written once), and the invoice's
storage_gb_hours equal to what the test computes itself from what it published and what S3 lists."""

from __future__ import annotations

import io
import json
import time
import uuid
from datetime import date
from decimal import Decimal

import boto3
import pyarrow.parquet as pq
import pytest
from django.core.management import call_command

from tenants.billing import services as billing
from tenants.devices import services as device_services
from tenants.history.services import history_policy_create
from tenants.models import Invoice, MqttQueuedMessage, RetainedMessage, Usage
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)

RETAINED = {"r/a": b"a" * 700, "r/bb": b"b" * 1_500}
QUEUED = [("q/1", b"1" * 300), ("q/22", b"2" * 900), ("q/big", b"B" * 3_000)]  # big: spilled


def sample() -> dict:
    out = io.StringIO()
    call_command("sample_storage", stdout=out)
    return json.loads(out.getvalue())


def wait_for(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_storage_is_sampled_once_an_hour_and_billed_exactly(s3_endpoint, monkeypatch, spark):
    bucket = f"storage-{uuid.uuid4().hex[:10]}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket=bucket)
    monkeypatch.setenv("OBJECT_STORE_URL", f"s3://{bucket}/mqtt")
    acme = tenant_services.tenant_create("acme")
    other = tenant_services.tenant_create("other")
    _, secret = device_services.device_create(tenant=acme, name="d", client_id_policy="any")
    _, other_secret = device_services.device_create(tenant=other, name="d", client_id_policy="any")
    for tenant in (acme, other):  # both keep their messages: the live segments hold both
        history_policy_create(tenant=tenant, topic_filter="#", days=1)
    process, port = start_pg_broker(
        "--large-payload-threshold", "2048", "--usage-flush-interval", "0.5"
    )
    try:
        offline = Paho(port, "acme/d", secret, "offline", clean=False, expiry=3600)
        offline.subscribe("q/#", 1)
        offline.close()
        publisher = Paho(port, "acme/d", secret, "pub")
        for topic, payload in RETAINED.items():
            publisher.publish(topic, payload, 1, retain=True)
        for topic, payload in QUEUED:
            publisher.publish(topic, payload, 1)
        publisher.close()
        noise = Paho(port, "other/d", other_secret, "noise")
        noise.publish("r/a", b"z" * 5_000, 1, retain=True)  # the other tenant's, not acme's
        noise.close()
        wait_for(lambda: MqttQueuedMessage.objects.filter(tenant=acme).count() == len(QUEUED))
        wait_for(lambda: RetainedMessage.objects.count() == 3)
    finally:
        process.terminate()  # flushes the archive's last segment
        assert process.wait(timeout=20) == 0

    # What the test computes itself: payload + topic of what it published (no properties sent)...
    assert all(p == {} for p in RetainedMessage.objects.values_list("properties", flat=True))
    assert all(p == {} for p in MqttQueuedMessage.objects.values_list("properties", flat=True))
    retained = sum(len(t.encode()) + len(p) for t, p in RETAINED.items())
    queued = sum(len(t.encode()) + len(p) for t, p in QUEUED)
    spilled = MqttQueuedMessage.objects.get(topic="q/big")
    assert spilled.object_key and spilled.payload is None  # in S3, counted by its object's size
    # ...and the archive as S3 lists it: acme's rows' share of each live segment.
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="mqtt/archive/")["Contents"]
    segments = [o for o in listed if o["Key"].endswith(".parquet")]
    assert segments and all("/archive/live/" in o["Key"] for o in segments)
    low = high = total_size = 0
    for obj in segments:
        body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        tenants = pq.read_table(io.BytesIO(body), columns=["tenant"]).column("tenant").to_pylist()
        mine = tenants.count("acme")
        low += obj["Size"] * mine // len(tenants)
        high += -(-obj["Size"] * mine // len(tenants))
        total_size += obj["Size"]

    first = sample()
    assert first["state"] == "sampled"
    measured = first["tenants"]["acme"]
    assert measured["retained"] == retained and measured["queued"] == queued
    assert low <= measured["archive"] <= high
    assert sum(t["archive"] for t in first["tenants"].values()) == total_size
    assert first["tenants"]["other"]["retained"] == len(b"r/a") + 5_000
    stored = retained + queued + measured["archive"]

    again = sample()  # the same hour: nothing written, nothing counted twice
    assert again["state"] == "already sampled" and again["key"] == first["key"]
    usage_keys = [
        o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="mqtt/usage/")["Contents"]
    ]
    assert sum(k.endswith("/storage-0000000000.parquet") for k in usage_keys) == 1
    assert sum(u.storage_byte_hours for u in Usage.objects.filter(tenant=acme)) == stored

    billing.price_book_set(
        acme.plan,
        effective_from=date(2026, 1, 1),
        base_fee_cents=0,
        dimensions={
            "storage_gb_hours": {
                "included": 0,
                "per": 1,
                "tiers": [{"up_to": None, "price": "1000"}],  # $1,000 per GB-hour: visible cents
            }
        },
    )
    period = first["hour"][:7]
    billing.billing_report(period, tenant=acme)
    invoice = Invoice.objects.get(tenant=acme, period=period)
    line = next(line for line in invoice.line_items if line["code"] == "storage_gb_hours")
    assert Decimal(str(line["quantity"])) == Decimal(stored) / 10**9
    cents = (Decimal(stored) / 10**9 * 1000 * 100).quantize(Decimal(1), rounding="ROUND_HALF_UP")
    assert line["amount_cents"] == int(cents)


def test_the_beat_task_samples_each_hour_once(tmp_path, monkeypatch):
    """The hourly beat entry, run in-process: a local archive (history + a shared live segment),
    one write per hour however often it runs, and a new hour samples again."""
    from datetime import UTC, datetime

    from django.conf import settings

    from common.stores.object_store import LocalObjectStore
    from tenants import tasks
    from tenants.usage.storage import storage_sample
    from tests.spark.conftest import message, parquet_bytes

    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    entry = settings.CELERY_BEAT_SCHEDULE["sample-storage"]
    assert entry["task"] == "tenants.tasks.sample_storage"
    assert entry["schedule"].total_seconds() <= 3600
    tenant_services.tenant_create("acme")
    store = LocalObjectStore(tmp_path)
    store.put("archive/tenant=acme/date=2026-09-01/hour=00/part-0000-0000.parquet", b"x" * 1000)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    rows = [message("acme", "t", b"a", now_ms)] * 3 + [message("beta", "t", b"b", now_ms)]
    live_key = f"archive/live/{datetime.now(UTC):date=%Y-%m-%d/hour=%H}/b-0000000001.parquet"
    store.put(live_key, parquet_bytes(rows))
    live_size = (tmp_path / live_key).stat().st_size

    first = tasks.sample_storage()
    assert first["state"] == "sampled" and first["tenants"] == 2
    assert tasks.sample_storage()["state"] == "already sampled"
    later = storage_sample(now=datetime.now(UTC).replace(year=2030), store=store)  # a new hour
    assert later["state"] == "sampled"
    share = live_size * 3 // 4  # acme has 3 of the live segment's 4 rows
    assert 1000 + share <= later["tenants"]["acme"]["archive"] <= 1000 + share + 1
    assert (
        later["tenants"]["acme"]["archive"] + later["tenants"]["beta"]["archive"]
        == 1000 + live_size
    )


def test_history_is_listed_incrementally_and_stays_exact(tmp_path):
    """Hour after hour the sampler lists only each tenant's days since its settled days (not the
    whole history), and still finds exactly what a full walk of the store's files finds; days
    settle into its index; a weekly (or `--full`) listing rebuilds the index."""
    from datetime import UTC, datetime, timedelta

    from common.stores.object_store import LocalObjectStore
    from tenants.usage import storage as storage_usage
    from tenants.usage.storage import HISTORY_INDEX_KEY, storage_sample

    class Recording(LocalObjectStore):
        listed: list[str] = []

        def sizes(self, prefix: str = "", start_after: str = "") -> dict[str, int]:
            found = super().sizes(prefix, start_after)
            self.listed.extend(k for k in found if k.startswith("archive/tenant="))
            return found

    store = Recording(tmp_path)
    tenant_services.tenant_create("acme")
    tenant_services.tenant_create("beta")
    now = datetime(2026, 11, 20, 10, 30, tzinfo=UTC)

    def part(tenant: str, day: datetime, hour: int, size: int) -> None:
        key = f"archive/tenant={tenant}/{day:date=%Y-%m-%d}/hour={hour:02d}/part-0000-0000.parquet"
        store.put(key, b"p" * size)

    # Thirty days of history for acme, ten for beta (one part an hour on a few hours).
    for back in range(30):
        day = now - timedelta(days=back)
        for hour in (0, 6, 12) if back else (0, 6):
            part("acme", day, hour, 100 + back)
        if back < 10:
            part("beta", day, 3, 1000 + back)

    def by_walk() -> dict[str, int]:
        """Independently: every history file on disk, summed per tenant."""
        totals: dict[str, int] = {}
        for path in (tmp_path / "archive").glob("tenant=*/**/*.parquet"):
            tenant = path.relative_to(tmp_path / "archive").parts[0].removeprefix("tenant=")
            totals[tenant] = totals.get(tenant, 0) + path.stat().st_size
        return totals

    def archive(result: dict) -> dict[str, int]:
        return {t: m["archive"] for t, m in result["tenants"].items()}

    store.listed = []
    first = storage_sample(now=now, store=store)  # no index yet: one full listing
    assert archive(first) == by_walk()
    assert len(store.listed) == 30 * 3 - 1 + 10
    index = json.loads(store.get(HISTORY_INDEX_KEY))
    assert index["settled_through"] == "2026-11-18"

    # An hour later a new part of today: listed are only the days after the settled ones.
    later = now + timedelta(hours=1)
    part("acme", later, 11, 77)
    store.listed = []
    second = storage_sample(now=later, store=store)
    assert archive(second) == by_walk()
    days = {storage_usage._history_day(k) for k in store.listed}
    assert days == {"2026-11-19", "2026-11-20"}
    assert len(store.listed) == (3 + 3) + (1 + 1)  # acme 19th + 20th (3 parts each), beta 2

    # Two days on: the 19th and 20th are listed once more as they settle into the index...
    two_days = later + timedelta(days=2)
    part("beta", two_days, 1, 5)
    store.listed = []
    third = storage_sample(now=two_days, store=store)
    assert archive(third) == by_walk()
    days = {storage_usage._history_day(k) for k in store.listed}
    assert days == {"2026-11-19", "2026-11-20", "2026-11-22"}
    assert json.loads(store.get(HISTORY_INDEX_KEY))["settled_through"] == "2026-11-20"
    # ...and from the next hour on, only the 22nd is.
    store.listed = []
    fourth = storage_sample(now=two_days + timedelta(hours=1), store=store)
    assert archive(fourth) == by_walk()
    assert {storage_usage._history_day(k) for k in store.listed} == {"2026-11-22"}

    # A week after the full listing, the next sample lists everything again (late compactions).
    week = now + timedelta(days=7, hours=2)
    store.listed = []
    rescan = storage_sample(now=week, store=store)
    assert archive(rescan) == by_walk()
    assert len(store.listed) == len(list((tmp_path / "archive").glob("tenant=*/**/*.parquet")))
    # `sample_storage --full` lists everything whenever an operator asks.
    store.listed = []
    forced = storage_sample(now=week + timedelta(hours=1), store=store, full=True)
    assert archive(forced) == by_walk()
    assert len(store.listed) == len(list((tmp_path / "archive").glob("tenant=*/**/*.parquet")))
