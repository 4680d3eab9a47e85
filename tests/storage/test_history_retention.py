"""Retention deletes whole hours of a tenant's history past what it keeps (its longest policy, a
day for its rules, nothing otherwise), leaves other tenants' and unknown tenants' hours alone,
and leaves the archive readable and the storage sampler's totals true."""

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from common.archive.files import compact_hour, hour_start, read_archive, read_manifest
from common.stores.object_store import LocalObjectStore
from data_plane.broker.message import Message
from data_plane.storage.archive_columns import publish_columns
from data_plane.storage.parquet_archive import ParquetArchiveWriter
from tenants.history.retention import retention_run
from tenants.history.services import history_policy_create
from tenants.rules import services as rule_services
from tenants.tasks import history_retention
from tenants.tenant import services as tenant_services
from tenants.usage.storage import history_bytes

pytestmark = pytest.mark.django_db

TENANTS = ("acme", "ruled", "bare", "gone")  # `gone` has history and no tenant any more


def _archive(store, now: datetime) -> list[datetime]:
    """Each tenant's rows at three hours (3 days, 30 hours and 2 hours ago), compacted."""
    hours = [hour_start(now - delta) for delta in (timedelta(days=3), timedelta(hours=30))]
    hours.append(hour_start(now - timedelta(hours=2)))
    for n, hour in enumerate(hours):
        batch = [
            (
                hour.timestamp() + 60,
                Message.from_publish(tenant, "c", f"t/{n}", b"x" * 50, 1, False, {}, "d"),
            )
            for tenant in TENANTS
        ]
        writer = ParquetArchiveWriter(store, writer_id=f"w{n}")
        writer.encode(publish_columns(batch), [])
        writer.upload_pending()
        compact_hour(store, hour)
    return hours


def _hours_of(store, tenant: str) -> list[str]:
    keys = store.list(f"archive/tenant={tenant}/")
    return sorted({"/".join(k.split("/")[2:4]) for k in keys})


def _label(hour: datetime) -> str:
    return hour.strftime("date=%Y-%m-%d/hour=%H")


def test_retention_deletes_the_hours_each_tenant_no_longer_keeps(tmp_path, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    store = LocalObjectStore(tmp_path)
    acme = tenant_services.tenant_create("acme")
    history_policy_create(tenant=acme, topic_filter="t/#", days=1)
    tenant_services.tenant_set_quota(acme, {"max_history_days": 2})
    history_policy_create(tenant=acme, topic_filter="u/#", days=2)  # the longest decides
    ruled = tenant_services.tenant_create("ruled")
    rule_services.rule_create(tenant=ruled, name="r", sql='SELECT * FROM "t/+"')
    tenant_services.tenant_create("bare")
    now = datetime.now(UTC)
    three_days, thirty_hours, two_hours = _archive(store, now)
    history_bytes(store, TENANTS, now, full=True)  # the sampler's index: 3 days ago is settled
    window = (now - timedelta(days=4), now)
    before = {t: store.sizes(f"archive/tenant={t}/") for t in TENANTS}

    dry = retention_run(now=now, store=store, dry_run=True)
    assert {t: s["hours_deleted"] for t, s in dry["tenants"].items()} == {
        "acme": 1,
        "ruled": 2,
        "bare": 3,
    }
    assert dry["unknown"] == ["gone"]
    assert {t: store.sizes(f"archive/tenant={t}/") for t in TENANTS} == before  # untouched

    done = retention_run(now=now, store=store)
    assert {t: (s["days"], s["hours_deleted"]) for t, s in done["tenants"].items()} == {
        "acme": (2, 1),
        "ruled": (1, 2),
        "bare": (0, 3),
    }
    assert done["bytes_deleted"] == sum(
        sum(before[t].values()) - sum(store.sizes(f"archive/tenant={t}/").values()) for t in TENANTS
    )
    assert _hours_of(store, "acme") == [_label(thirty_hours), _label(two_hours)]
    assert _hours_of(store, "ruled") == [_label(two_hours)]
    assert _hours_of(store, "bare") == []
    assert len(_hours_of(store, "gone")) == 3  # an unknown tenant is left to the operator
    # Still readable, and only what is kept: the markers no longer name what went.
    assert [r["topic"] for r in read_archive(store, *window, "acme").to_pylist()] == ["t/1", "t/2"]
    assert read_archive(store, *window, "bare").num_rows == 0
    assert read_archive(store, *window, "gone").num_rows == 3
    parts = read_manifest(store, three_days).parts
    assert not any("tenant=acme/" in p for p in parts) and any("tenant=gone/" in p for p in parts)
    # The sampler's settled totals follow what was deleted.
    totals, how = history_bytes(store, TENANTS, now)
    assert how == "incremental"
    for tenant in TENANTS:
        assert totals.get(tenant, 0) == sum(store.sizes(f"archive/tenant={tenant}/").values())

    # Run again (the command, the beat task): nothing more to delete.
    out = io.StringIO()
    call_command("history_retention", "--tenant", "acme", "--dry-run", stdout=out)
    assert json.loads(out.getvalue())["tenants"]["acme"]["hours_deleted"] == 0
    assert history_retention()["hours_deleted"] == 0
