"""Compaction as `make run` does it: Celery beat on a real worker (embedded Redis), not eager."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from common.archive.files import read_archive, read_manifest
from common.stores.object_store import open_object_store
from data_plane.broker.message import Message
from data_plane.storage.archive_columns import publish_columns
from data_plane.storage.parquet_archive import ParquetArchiveWriter
from tests.control_plane.test_celery import worker_and_beat

pytestmark = pytest.mark.django_db(transaction=True)
HOUR = datetime(2024, 2, 29, 23, tzinfo=UTC)


@pytest.fixture
def archive_store(tmp_path, monkeypatch):
    # Set before the worker starts: it inherits the environment.
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{tmp_path}/objects")
    monkeypatch.setenv("ARCHIVE_COMPACTION_SECONDS", "1")
    store = open_object_store()
    for writer_id, tenant in (("b1", "acme"), ("b2", "zeta"), ("b3", "acme")):
        columns = publish_columns(
            [
                (
                    HOUR.timestamp() + i * 60,
                    Message.from_publish(tenant, "c", "t", bytes([i]), 0, False, {}, "d"),
                )
                for i in range(3)
            ]
        )
        writer = ParquetArchiveWriter(store, writer_id=writer_id)
        writer.encode(columns, [], None)
        writer.upload_pending()
    return store


@pytest.fixture
def worker(archive_store, tmp_path):
    """Started after `archive_store` set the environment it inherits."""
    with worker_and_beat(tmp_path, connection.settings_dict["NAME"]) as env:
        yield env


def test_beat_compacts_closed_hours_on_a_real_worker(archive_store, worker):
    window = (HOUR, HOUR + timedelta(hours=1))
    before = read_archive(archive_store, *window, "acme").to_pylist()
    assert len(before) == 6
    deadline = time.monotonic() + 60
    while read_manifest(archive_store, HOUR) is None:
        assert time.monotonic() < deadline, "the worker never compacted the hour"
        time.sleep(0.3)
    assert read_manifest(archive_store, HOUR).rows == 9
    assert archive_store.list("archive/live/") == [
        "archive/live/date=2024-02-29/hour=23/_COMPACTED"
    ]
    assert read_archive(archive_store, *window, "acme").to_pylist() == before
    assert read_archive(archive_store, *window, "zeta").num_rows == 3
