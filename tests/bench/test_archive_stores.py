"""bench.archive's object stores: each run gets an empty store, on a local folder or on moto's S3
server, and the archived rows are counted back from what the broker's writer put there."""

import os
import time
from types import SimpleNamespace

import pytest

from bench import archive
from common.stores.object_store import open_object_store
from data_plane.storage.archive_columns import publish_columns
from data_plane.storage.parquet_archive import ParquetArchiveWriter


def _publish(topic: str) -> SimpleNamespace:
    return SimpleNamespace(
        topic=topic,
        payload=b'{"t": 21.5}',
        qos=0,
        retain=False,
        properties={},
        publisher="c",
        tenant="acme",
        device="d",
        origin=None,
    )


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_each_run_gets_an_empty_store_and_its_rows_are_counted(kind):
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID")}
    stores = archive.Stores(kind)
    try:
        first, second = stores.new(), stores.new()
        assert first != second and first.startswith(f"{kind}://")
        writer = ParquetArchiveWriter(open_object_store(first))
        now = time.time()
        rows = publish_columns([(now, _publish(f"t/{i}")) for i in range(7)])
        writer.encode(rows, [{"event": "client.connected", "tenant": "acme", "ts": 0}])
        assert writer.upload_pending() == 8  # rows
        assert archive.archived_publishes(first) == 7  # the lifecycle row is not a publish
        assert archive.archived_publishes(second) == 0
        stores.discard(first)
        stores.discard(second)
    finally:
        stores.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
