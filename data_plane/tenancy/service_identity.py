"""Internal service identities: how the portal's live views reach a tenant's traffic.

The portal connects as `{tenant}/$portal` with client id `$portal-{random}` and a short-lived
token that the control plane signs with the key it shares with the brokers (`MQTT_SERVICE_KEY`,
or the embedded default file `.data/service-key`). Such a connection lives in that tenant's
namespace like any device — its topics, `$SYS` and `$events` — may subscribe (never to a shared
group, which would take messages from the tenant's consumers) and never publish. It is not one
of the tenant's connections: not counted against its quota, not in its `$SYS` or `$events`.
Device names cannot start with `$`, and devices may not use `$`-client ids, so no device can pose
as it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

SERVICE_DEVICE = "$portal"
CLIENT_PREFIX = "$portal-"
DEFAULT_KEY_FILE = Path(__file__).resolve().parents[2] / ".data" / "service-key"


def load_key() -> bytes:
    """The shared key: `MQTT_SERVICE_KEY`, else the embedded default file (created once)."""
    value = os.environ.get("MQTT_SERVICE_KEY")
    if value:
        return value.encode()
    path = Path(os.environ.get("MQTT_SERVICE_KEY_FILE", DEFAULT_KEY_FILE))
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
    return path.read_text().strip().encode()


def new_client_id() -> str:
    return CLIENT_PREFIX + secrets.token_hex(12)


def sign(key: bytes, tenant: str, client_id: str, ttl: int = 300, now: float | None = None) -> str:
    expires = int((now if now is not None else time.time()) + ttl)
    return f"v1.{expires}.{_mac(key, tenant, client_id, expires)}"


def verify(key: bytes, tenant: str, client_id: str, token: str, now: float | None = None) -> bool:
    try:
        version, expires_text, mac = token.split(".")
        expires = int(expires_text)
    except ValueError:
        return False
    if version != "v1" or expires < (now if now is not None else time.time()):
        return False
    if not client_id.startswith(CLIENT_PREFIX):
        return False
    return hmac.compare_digest(mac, _mac(key, tenant, client_id, expires))


def _mac(key: bytes, tenant: str, client_id: str, expires: int) -> str:
    message = f"{tenant}\n{client_id}\n{expires}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


class ReadOnly:
    """The service identity's authorizer: subscribe within the tenant, never publish."""

    def can_publish(self, topic: str) -> bool:
        return False

    def can_subscribe(self, topic_filter: str) -> bool:
        return not topic_filter.startswith("$share/")
