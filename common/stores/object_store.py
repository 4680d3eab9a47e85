"""One interface over the object store: S3 (boto3) in production, a local directory by default.

`OBJECT_STORE_URL` is `s3://bucket/prefix` or `file:///absolute/path`; unset, `.data/objects`.
Keys are `/`-separated relative paths. Calls are blocking (boto3 is); the broker runs them in a
thread (`asyncio.to_thread`) off its event loop.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

import common

# What `put` stores: bytes, or any object exporting its bytes through the buffer protocol (such
# as the Arrow buffer of a Parquet file just written: no copy into `bytes` first).
BytesLike = Any

DEFAULT_DIR = Path(common.__file__).resolve().parent.parent / ".data" / "objects"


class ObjectStore(Protocol):
    url: str

    def put(self, key: str, data: BytesLike) -> None: ...

    def get(self, key: str) -> bytes: ...

    def delete(self, key: str) -> None: ...

    def list(self, prefix: str = "") -> list[str]: ...

    def sizes(self, prefix: str = "", start_after: str = "") -> dict[str, int]: ...

    def tail(self, key: str, size: int) -> tuple[bytes, int]: ...


class ObjectNotFound(KeyError):
    pass


def _clean_key(key: str) -> str:
    parts = [p for p in key.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"invalid object key {key!r}")
    return "/".join(parts)


class LocalObjectStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root / _clean_key(key)

    def put(self, key: str, data: BytesLike) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(data)
        os.replace(partial, path)  # readers never see half an object

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectNotFound(key) from None

    def tail(self, key: str, size: int) -> tuple[bytes, int]:
        """The object's last `size` bytes (all of a smaller one) and its whole size: a Parquet
        footer without the rest (`common.archive.footer`)."""
        try:
            with self._path(key).open("rb") as file:
                whole = file.seek(0, os.SEEK_END)
                file.seek(max(0, whole - size))
                return file.read(), whole
        except FileNotFoundError:
            raise ObjectNotFound(key) from None

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> list[str]:
        keys = []
        # Walk only the folder the prefix names (all of it for a partial last part): a root
        # holding the archive and the journey has many files a narrow listing need not visit.
        folder = prefix.rpartition("/")[0].strip("/")
        base = self.root / _clean_key(folder) if folder else self.root
        for path in base.rglob("*"):
            if path.is_file() and not path.name.endswith(".partial"):
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def sizes(self, prefix: str = "", start_after: str = "") -> dict[str, int]:
        """Each key under `prefix` (and after `start_after`, as S3's StartAfter) and its size in
        bytes (what the storage sampler meters)."""
        return {
            key: self._path(key).stat().st_size
            for key in self.list(prefix)
            if not start_after or key > start_after
        }

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)


class _BufferFile(io.RawIOBase):
    """A read-only, seekable file over a buffer (no copy of it; each read copies its chunk)."""

    def __init__(self, view: memoryview) -> None:
        self._view = view.cast("B")
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        chunk = self._view[self._at : self._at + len(target)]
        target[: len(chunk)] = chunk
        self._at += len(chunk)
        return len(chunk)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: len(self._view)}[whence]
        self._at = max(0, base + offset)
        return self._at

    def tell(self) -> int:
        return self._at

    def __len__(self) -> int:  # botocore's Content-Length
        return len(self._view)


class S3ObjectStore:
    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None) -> None:
        import boto3

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}"
        self.client = boto3.client("s3", endpoint_url=endpoint_url)
        self._endpoint_url = endpoint_url
        self._presigner: Any = None

    def _key(self, key: str) -> str:
        key = _clean_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: BytesLike) -> None:
        if not isinstance(data, bytes | bytearray):
            # botocore takes bytes or a file: a file over the buffer, read in chunks as it is
            # checksummed and sent, rather than a copy of it all (a live archive segment is
            # megabytes, and a copy of that many fresh pages cost the broker ~0.5 us per KiB).
            data = _BufferFile(memoryview(data))
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get(self, key: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except self.client.exceptions.NoSuchKey:
            raise ObjectNotFound(key) from None
        body: bytes = response["Body"].read()
        return body

    def tail(self, key: str, size: int) -> tuple[bytes, int]:
        """The object's last `size` bytes (all of a smaller one) and its whole size, in one
        ranged GET (a suffix range: no HEAD first)."""
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self._key(key), Range=f"bytes=-{size}"
            )
        except self.client.exceptions.NoSuchKey:
            raise ObjectNotFound(key) from None
        body: bytes = response["Body"].read()
        # "bytes 100-199/200" for a range; no Content-Range when the whole object came
        whole = response.get("ContentRange", "").rpartition("/")[2]
        return body, int(whole) if whole.isdigit() else len(body)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def presigned_get(self, key: str, expires_in: int) -> str:
        """A URL that GETs the object without credentials until `expires_in` seconds from now
        (S3's presigned URL, Signature Version 4: signed here, no request made)."""
        if self._presigner is None:
            import boto3
            from botocore.config import Config

            self._presigner = boto3.client(
                "s3", endpoint_url=self._endpoint_url, config=Config(signature_version="s3v4")
            )
        url: str = self._presigner.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self._key(key)},
            ExpiresIn=expires_in,
        )
        return url

    def list(self, prefix: str = "") -> list[str]:
        full = self._key(prefix) if prefix else (self.prefix + "/" if self.prefix else "")
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
            keys.extend(item["Key"][strip:] for item in page.get("Contents", []))
        return sorted(keys)

    def sizes(self, prefix: str = "", start_after: str = "") -> dict[str, int]:
        """Each key under `prefix` (and after `start_after`: S3 starts the listing there, so the
        keys before it cost nothing) and its size in bytes, from the listing (no object read)."""
        full = self._key(prefix) if prefix else (self.prefix + "/" if self.prefix else "")
        strip = len(self.prefix) + 1 if self.prefix else 0
        sizes: dict[str, int] = {}
        paginator = self.client.get_paginator("list_objects_v2")
        extra = {"StartAfter": self._key(start_after)} if start_after else {}
        for page in paginator.paginate(Bucket=self.bucket, Prefix=full, **extra):
            for item in page.get("Contents", []):
                sizes[item["Key"][strip:]] = int(item["Size"])
        return sizes


def open_object_store(url: str | None = None) -> ObjectStore:
    """The store named by `url` or `OBJECT_STORE_URL`; S3 honours `AWS_ENDPOINT_URL` (boto3)."""
    url = url or os.environ.get("OBJECT_STORE_URL") or ""
    if not url:
        return LocalObjectStore(DEFAULT_DIR)
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return LocalObjectStore(Path(parsed.path))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"OBJECT_STORE_URL {url!r} names no bucket")
        return S3ObjectStore(parsed.netloc, parsed.path)
    raise ValueError(f"OBJECT_STORE_URL must be s3://bucket/prefix or file:///path, not {url!r}")
