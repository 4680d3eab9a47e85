"""The object store against moto's S3 server over HTTP and a local directory: one interface."""

import uuid

import boto3
import pyarrow as pa
import pytest

from common.stores.object_store import (
    LocalObjectStore,
    ObjectNotFound,
    S3ObjectStore,
    open_object_store,
)


@pytest.fixture(params=["s3", "file"])
def store(request, tmp_path):
    if request.param == "file":
        return open_object_store(f"file://{tmp_path}/objects")
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    return open_object_store(f"s3://{bucket}/prefix")


def test_put_get_list_delete(store):
    store.put("a/b/one.bin", b"\x00\x01")
    store.put("a/two.bin", b"two")
    store.put("c/three.bin", b"3")
    assert store.get("a/b/one.bin") == b"\x00\x01"
    assert store.list("a/") == ["a/b/one.bin", "a/two.bin"]
    assert len(store.list()) == 3
    store.delete("a/two.bin")
    with pytest.raises(ObjectNotFound):
        store.get("a/two.bin")


def test_a_buffer_is_stored_whole(store):
    """What the archive hands over: an Arrow buffer (a closed segment) or a memoryview, megabytes
    long, stored as the bytes it holds (S3 reads it in chunks as it checksums and sends it)."""
    body = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB, not a multiple of any chunk
    store.put("seg/arrow.parquet", pa.py_buffer(body))
    store.put("seg/view.parquet", memoryview(body)[5:])
    store.put("seg/empty.parquet", pa.py_buffer(b""))
    assert store.get("seg/arrow.parquet") == body
    assert store.get("seg/view.parquet") == body[5:]
    assert store.get("seg/empty.parquet") == b""


def test_urls_pick_the_backend(tmp_path, s3_endpoint):
    assert isinstance(open_object_store(f"file://{tmp_path}"), LocalObjectStore)
    assert isinstance(open_object_store("s3://bucket/p"), S3ObjectStore)
    with pytest.raises(ValueError):
        open_object_store("ftp://x")


def test_keys_cannot_escape_the_root(tmp_path):
    store = LocalObjectStore(tmp_path / "root")
    with pytest.raises(ValueError):
        store.put("../outside", b"x")
