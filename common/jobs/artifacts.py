"""Job artifacts (a firmware file a tenant uploaded) and the short-lived URLs devices fetch them
with, as AWS IoT Jobs hands out S3 presigned URLs.

A job document names an artifact with AWS's placeholder, its target being `artifact/NAME` (a
file of the job's own tenant, `POST /api/v1/jobs/artifacts`):

    {"url": "${aws:iot:s3-presigned-url:artifact/firmware-2.1.bin}"}

Whenever a document is handed to a device (start-next, describe, an update with
`includeJobDocument`, notify-next), each placeholder becomes a URL valid for
`JOB_ARTIFACT_URL_SECONDS` (3600 by default, AWS's `expiresInSec` range 60-3600):

- on S3 (`OBJECT_STORE_URL=s3://…`), an S3 presigned GET of the object;
- on the embedded store (a local directory), a URL of the web process
  (`{PORTAL_URL}/artifacts/{tenant}/{name}?expires=E&signature=S`) whose signature is an
  HMAC-SHA256 of the tenant, the name and the expiry under the key the platform's processes
  share (`common.security.service_token.load_key`, its own message prefix): the web process checks it
  and serves the file, no other credential needed, as with a presigned URL.

The objects live under the tenant's prefix: `artifacts/tenant={slug}/{name}`. A tenant's
documents only ever name its own artifacts (checked when a job is created), and a URL names its
tenant inside the signature, so none reaches another tenant's file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

PLACEHOLDER = re.compile(r"\$\{aws:iot:s3-presigned-url:([^}]*)\}")
TARGET_PREFIX = "artifact/"
# An artifact's name: what a file may be called, no path (it is a key's last level).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
OBJECT_PREFIX = "artifacts"
DEFAULT_EXPIRY = 3600
MIN_EXPIRY, MAX_EXPIRY = 60, 3600  # AWS's presignedUrlConfig.expiresInSec
DOWNLOAD_PATH = "/artifacts"  # the web process's route for the embedded store's URLs


def object_key(tenant: str, name: str) -> str:
    return f"{OBJECT_PREFIX}/tenant={tenant}/{name}"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def references(document: Any) -> tuple[list[str], list[str]]:
    """The artifact names a document's placeholders name, and the placeholders' targets that
    name none (AWS's S3 URLs, a bad name): each once, in order."""
    names: list[str] = []
    invalid: list[str] = []
    for text in _strings(document):
        for match in PLACEHOLDER.finditer(text):
            target = match.group(1)
            name = target[len(TARGET_PREFIX) :] if target.startswith(TARGET_PREFIX) else ""
            (names if NAME.match(name) else invalid).append(name if NAME.match(name) else target)
    return list(dict.fromkeys(names)), list(dict.fromkeys(invalid))


def filled(document: Any, url_for: Callable[[str], str]) -> Any:
    """`document` with each `artifact/NAME` placeholder replaced by `url_for(NAME)`; the same
    object when it has none."""
    if isinstance(document, str):
        if "${aws:iot:s3-presigned-url:" not in document:
            return document

        def replace(match: re.Match[str]) -> str:
            target = match.group(1)
            name = target[len(TARGET_PREFIX) :] if target.startswith(TARGET_PREFIX) else ""
            return url_for(name) if NAME.match(name) else match.group(0)

        return PLACEHOLDER.sub(replace, document)
    if isinstance(document, dict):
        fields = {key: filled(value, url_for) for key, value in document.items()}
        changed = any(fields[key] is not value for key, value in document.items())
        return fields if changed else document
    if isinstance(document, list):
        items = [filled(value, url_for) for value in document]
        changed = any(new is not old for new, old in zip(items, document, strict=True))
        return items if changed else document
    return document


def signature(key: bytes, tenant: str, name: str, expires: int) -> str:
    message = f"job-artifact\n{tenant}\n{name}\n{expires}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def verify(
    key: bytes, tenant: str, name: str, expires: str, given: str, now: float | None = None
) -> bool:
    """Whether a web URL's `expires` and `signature` let it fetch `tenant`'s `name` now."""
    if not expires.isdigit() or int(expires) < (now if now is not None else time.time()):
        return False
    return hmac.compare_digest(given, signature(key, tenant, name, int(expires)))


def expiry_from_env() -> int:
    text = os.environ.get("JOB_ARTIFACT_URL_SECONDS", "") or str(DEFAULT_EXPIRY)
    if not text.isdigit() or not MIN_EXPIRY <= int(text) <= MAX_EXPIRY:
        raise ValueError(
            f"JOB_ARTIFACT_URL_SECONDS must be seconds from {MIN_EXPIRY} to {MAX_EXPIRY}: {text!r}"
        )
    return int(text)


def web_url_from_env() -> str:
    """Where devices reach the web process (as `control_plane.settings.PORTAL_URL`)."""
    default = f"http://127.0.0.1:{os.environ.get('WEB_PORT', '8000')}"
    return (os.environ.get("PORTAL_URL") or default).rstrip("/")


class ArtifactLinks:
    """Makes the URLs of a tenant's artifacts (S3 presigned, or signed for the web process)."""

    def __init__(self, store: Any, *, key: bytes, web_url: str, expires_in: int) -> None:
        self.store = store
        self.key, self.web_url, self.expires_in = key, web_url, expires_in

    @classmethod
    def from_env(cls, store: Any = None) -> ArtifactLinks:
        from common.security.service_token import load_key
        from common.stores.object_store import open_object_store

        return cls(
            store if store is not None else open_object_store(),
            key=load_key(),
            web_url=web_url_from_env(),
            expires_in=expiry_from_env(),
        )

    def url(self, tenant: str, name: str, now: float | None = None) -> str:
        presign = getattr(self.store, "presigned_get", None)
        if presign is not None:
            url: str = presign(object_key(tenant, name), self.expires_in)
            return url
        expires = int((now if now is not None else time.time()) + self.expires_in)
        mac = signature(self.key, tenant, name, expires)
        path = f"{DOWNLOAD_PATH}/{quote(tenant)}/{quote(name)}"
        return f"{self.web_url}{path}?expires={expires}&signature={mac}"

    def fill(self, tenant: str, document: Any) -> Any:
        """The job document as a device gets it: its placeholders replaced by URLs."""
        return filled(document, lambda name: self.url(tenant, name))

    def fill_reply(self, tenant: str, body: Any) -> Any:
        """A jobs reply or notification with the job documents it carries filled in."""
        if not isinstance(body, dict):
            return body
        execution = body.get("execution")
        if isinstance(execution, dict) and "jobDocument" in execution:
            document = self.fill(tenant, execution["jobDocument"])
            if document is not execution["jobDocument"]:
                body = {**body, "execution": {**execution, "jobDocument": document}}
        if "jobDocument" in body:
            document = self.fill(tenant, body["jobDocument"])
            if document is not body["jobDocument"]:
                body = {**body, "jobDocument": document}
        return body
