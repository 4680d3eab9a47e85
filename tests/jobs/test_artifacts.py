"""Job artifacts: a tenant uploads a file through the REST API, a job document names it with
AWS's placeholder, and a device (AWS's SDK, over the broker) gets a short-lived URL in the
document and downloads the bytes with a plain HTTP GET: from the web process on the embedded
store, from S3 (moto) when the store is S3. From the attacker's side: an expired, tampered or
re-targeted URL is a 403, another tenant's artifact is a 404 and cannot be named in a job."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from common.jobs import artifacts
from common.security.service_token import load_key
from tests.jobs.test_aws_sdk import SdkJobsDevice
from tests.shadows.conftest import api_client, make_fleet

pytestmark = pytest.mark.django_db(transaction=True)

FIRMWARE = bytes(range(256)) * 300  # 76,800 bytes, every byte value


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def upload(api, name: str, data: bytes = FIRMWARE):
    return api.post(
        f"/api/v1/jobs/artifacts?name={name}", data, content_type="application/octet-stream"
    )


@pytest.fixture
def local_objects(tmp_path, monkeypatch):
    """The web process's object store for the test: a folder of its own."""
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{tmp_path / 'objects'}")


def test_a_device_downloads_its_jobs_artifact_by_the_url_in_its_document(
    jobs_broker, fleet, local_objects, tmp_path
):
    thing = f"boiler-{uuid.uuid4().hex[:6]}"
    cert, key = fleet.device(thing)
    api = api_client(fleet.tenant)
    made = upload(api, "fw-2.1.bin")
    assert made.status_code == 201, made.content
    placeholder = made.json()["placeholder"]
    assert placeholder == "${aws:iot:s3-presigned-url:artifact/fw-2.1.bin}"
    document = {"operation": "ota", "files": [{"url": placeholder, "size": len(FIRMWARE)}]}
    body = {"job_id": "ota-art", "document": document, "targets": {"devices": [thing]}}
    created = api.post("/api/v1/jobs", body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["document"] == document  # stored as given
    assert created.json()["artifacts"] == ["fw-2.1.bin"]

    device = SdkJobsDevice(jobs_broker, cert, key, thing, 5)
    try:
        started = device.start_next().execution
        url = started.job_document["files"][0]["url"]
        assert url.startswith(f"{jobs_broker_web(url)}/artifacts/{fleet.slug}/fw-2.1.bin?")
        assert started.job_document["operation"] == "ota"
        status, data = http_get(url)  # no credential but the URL's own signature
        assert status == 200 and data == FIRMWARE
        expires = int(parse_qs(urlparse(url).query)["expires"][0])
        assert 3500 < expires - time.time() <= 3600  # AWS's default expiresInSec, one hour
        # The same in DescribeJobExecution's answer.
        described = device.describe("ota-art").execution.job_document["files"][0]["url"]
        assert http_get(described) == (200, FIRMWARE)
    finally:
        device.close()

    # An attacker's edits: a later expiry, another signature, another tenant's or file's path.
    parsed = urlparse(url)
    query = parse_qs(parsed.query)
    later = {"expires": str(expires + 3600), "signature": query["signature"][0]}
    assert http_get(parsed._replace(query=urlencode(later)).geturl())[0] == 403
    forged = {"expires": str(expires), "signature": "0" * 64}
    assert http_get(parsed._replace(query=urlencode(forged)).geturl())[0] == 403
    other = make_fleet(tmp_path / "other", "ar")
    assert upload(api_client(other.tenant), "fw-2.1.bin", b"theirs").status_code == 201
    elsewhere = parsed.path.replace(f"/{fleet.slug}/", f"/{other.slug}/")
    assert http_get(parsed._replace(path=elsewhere).geturl())[0] == 403
    # An expired URL, however well signed, is refused.
    past = int(time.time()) - 1
    old = {
        "expires": past,
        "signature": artifacts.signature(load_key(), fleet.slug, "fw-2.1.bin", past),
    }
    assert http_get(parsed._replace(query=urlencode(old)).geturl())[0] == 403
    assert http_get(parsed._replace(query="").geturl())[0] == 403


def jobs_broker_web(url: str) -> str:
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}"


def test_artifacts_over_rest_and_what_another_tenant_cannot_do(jobs_broker, fleet, local_objects):
    fleet.device("lamp")
    api = api_client(fleet.tenant)
    assert upload(api, "boot.img", b"v1").status_code == 201
    again = upload(api, "boot.img", b"v2")
    assert again.status_code == 409 and "boot.img" in again.json()["error"]["message"]
    bad = upload(api, "../etc/passwd")
    assert bad.status_code == 400 and "name" in str(bad.json())
    form = api.post(
        "/api/v1/jobs/artifacts",
        {"file": _file("app.bin", b"\x00app"), "name": "app-1.bin"},
        format="multipart",
    )
    assert form.status_code == 201, form.content
    assert form.json()["size"] == 4 and form.json()["name"] == "app-1.bin"
    listed = api.get("/api/v1/jobs/artifacts").json()
    assert [a["name"] for a in listed] == ["app-1.bin", "boot.img"]
    shown = api.get("/api/v1/jobs/artifacts/boot.img").json()
    assert shown["size"] == 2 and len(shown["sha256"]) == 64

    # A job names artifacts of its own tenant only; anything else is a 400 naming it.
    base = {"targets": {"devices": ["lamp"]}}
    for job_id, url, word in (
        ("j1", "${aws:iot:s3-presigned-url:artifact/nope.bin}", "nope.bin"),
        ("j2", "${aws:iot:s3-presigned-url:https://s3.amazonaws.com/b/k}", "s3.amazonaws.com"),
    ):
        refused = api.post(
            "/api/v1/jobs", {**base, "job_id": job_id, "document": {"u": url}}, format="json"
        )
        assert refused.status_code == 400 and word in refused.json()["error"]["message"]
    reserved = api.post(
        "/api/v1/jobs", {**base, "job_id": "artifacts", "document": {}}, format="json"
    )
    assert reserved.status_code == 400 and "reserved" in str(reserved.json())
    running = {**base, "job_id": "boot", "document": {"u": shown["placeholder"]}}
    assert api.post("/api/v1/jobs", running, format="json").status_code == 201
    busy = api.delete("/api/v1/jobs/artifacts/boot.img")
    assert busy.status_code == 409 and "boot" in busy.json()["error"]["message"]

    # Tenant B: A's artifacts are not there for it, and its jobs cannot name them.
    (fleet.folder / "b").mkdir()
    other = make_fleet(fleet.folder / "b", "bt")
    other.device("lamp")
    b = api_client(other.tenant)
    assert b.get("/api/v1/jobs/artifacts").json() == []
    assert b.get("/api/v1/jobs/artifacts/boot.img").status_code == 404
    assert b.delete("/api/v1/jobs/artifacts/boot.img").status_code == 404
    theirs = {**running, "job_id": "steal"}
    refused = b.post("/api/v1/jobs", theirs, format="json")
    assert refused.status_code == 400 and "boot.img" in refused.json()["error"]["message"]
    viewer = api_client(fleet.tenant, role="viewer")
    assert upload(viewer, "x.bin").status_code == 403

    assert api.post("/api/v1/jobs/boot/cancel", {}, format="json").status_code == 200
    assert api.delete("/api/v1/jobs/artifacts/boot.img").status_code == 204
    assert api.get("/api/v1/jobs/artifacts/boot.img").status_code == 404


def _file(name: str, data: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


def test_on_s3_the_url_is_an_s3_presigned_url(s3_endpoint, monkeypatch, tmp_path):
    """With `OBJECT_STORE_URL=s3://…` the upload lands in the tenant's prefix of the bucket and
    the URL a device gets is S3's own presigned GET (moto's server here), fetched without
    credentials."""
    from bench.s3 import CREDENTIALS, create_bucket

    bucket = f"art-{uuid.uuid4().hex[:8]}"
    create_bucket({**CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint}, bucket)
    monkeypatch.setenv("OBJECT_STORE_URL", f"s3://{bucket}/platform")
    fleet = make_fleet(tmp_path, "s3")
    api = api_client(fleet.tenant)
    assert upload(api, "fw.bin").status_code == 201
    links = artifacts.ArtifactLinks.from_env()
    url = links.fill(fleet.slug, {"u": "${aws:iot:s3-presigned-url:artifact/fw.bin}"})["u"]
    assert url.startswith(s3_endpoint) and "X-Amz-Signature" in url
    assert f"platform/artifacts/tenant%3D{fleet.slug}/fw.bin" in url or (
        f"platform/artifacts/tenant={fleet.slug}/fw.bin" in url
    )
    assert http_get(url) == (200, FIRMWARE)
