"""Tokens of the identities the platform signs, shared by whoever signs them and the broker.

Two platform identities live in a tenant's namespace without being one of its clients (not
counted, metered or limited):

- `{tenant}/$portal`, client id `$portal-…`: the portal's live views; subscribes, never publishes.
- `{tenant}/$rules`, client id `$rules-…`: the rule jobs' republish action; publishes inside its
  tenant, never subscribes.

Two more are the portal's MQTT client in the browser, driven by a person: their traffic is the
tenant's own, like a device's — metered (messages, connection-minutes), counted against its
quotas and rate limits and held to its ACL (as a device named `$console` / `$viewer`):

- `{tenant}/$console`, client id `$console-…`: for a member who may write.
- `{tenant}/$viewer`, client id `$viewer-…`: for a member who may only read (never publishes).

A token is `v1.{expires}.{hex HMAC-SHA256(key, tenant \\n client id \\n expires)}` under the key the
signers share with the brokers (`MQTT_SERVICE_KEY`, or the embedded default file
`.data/service-key`). The client id is inside the MAC and its prefix names the identity, so a
portal token cannot be replayed as a rules connection, nor either for another tenant.

Here (not in `data_plane`) because the Spark jobs sign tokens too and import neither plane.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from common.security.key_files import DATA_DIR, shared_key

DEFAULT_KEY_FILE = DATA_DIR / "service-key"

PORTAL_DEVICE = "$portal"
RULES_DEVICE = "$rules"
CONSOLE_DEVICE = "$console"
VIEWER_DEVICE = "$viewer"
# The device name each identity connects as, and the client id prefix it must use (no prefix is
# a prefix of another: a token names its identity through its client id).
CLIENT_PREFIXES = {
    PORTAL_DEVICE: "$portal-",
    RULES_DEVICE: "$rules-",
    CONSOLE_DEVICE: "$console-",
    VIEWER_DEVICE: "$viewer-",
}
# The browser client's identities: tenant traffic, not the platform's.
TENANT_DEVICES = frozenset({CONSOLE_DEVICE, VIEWER_DEVICE})
TENANT_CLIENT_PREFIXES = tuple(CLIENT_PREFIXES[device] for device in sorted(TENANT_DEVICES))
# A claim certificate's connections (`$claim-…`, device `$claim`) and the fleet provisioning
# service's replies to them (`$aws-provisioning`): the tenant's fleet provisioning, whose MQTT
# messages AWS bills as messaging (issue 44). Client ids, so devices cannot take them.
CLAIM_CLIENT_PREFIX = "$claim-"
PROVISIONING_PUBLISHER = "$aws-provisioning"
# Metered as the tenant's messages: the browser client's, what the tenant's rules republish
# (a rule that fans one message out to thousands is the tenant's traffic: issue 29), and its
# fleet provisioning by claim.
BILLED_CLIENT_PREFIXES = (
    *TENANT_CLIENT_PREFIXES,
    CLIENT_PREFIXES[RULES_DEVICE],
    CLAIM_CLIENT_PREFIX,
    PROVISIONING_PUBLISHER,
)


def is_platform_client(client_id: str) -> bool:
    """Whether traffic from / to this client id is the platform's own (`$events`, `$SYS`, the
    portal's live views), which usage metering leaves out. Devices may not take `$` client
    ids; the browser client's (`$console-…`, `$viewer-…`), the rules' republish (`$rules-…`)
    and fleet provisioning's (`$claim-…` and the replies of `$aws-provisioning`) are the
    tenant's."""
    return client_id[:1] == "$" and not client_id.startswith(BILLED_CLIENT_PREFIXES)


def load_key() -> bytes:
    """The shared key: `MQTT_SERVICE_KEY`, else the embedded default file (created once)."""
    return shared_key("MQTT_SERVICE_KEY", DEFAULT_KEY_FILE)


def new_client_id(device: str = PORTAL_DEVICE) -> str:
    return CLIENT_PREFIXES[device] + secrets.token_hex(12)


def sign(key: bytes, tenant: str, client_id: str, ttl: int = 300, now: float | None = None) -> str:
    expires = int((now if now is not None else time.time()) + ttl)
    return f"v1.{expires}.{_mac(key, tenant, client_id, expires)}"


def verify(
    key: bytes,
    tenant: str,
    client_id: str,
    token: str,
    now: float | None = None,
    *,
    device: str = PORTAL_DEVICE,
) -> bool:
    """Whether `token` lets `client_id` connect as `{tenant}/{device}` now."""
    prefix = CLIENT_PREFIXES.get(device)
    if prefix is None or not client_id.startswith(prefix):
        return False
    try:
        version, expires_text, mac = token.split(".")
        expires = int(expires_text)
    except ValueError:
        return False
    if version != "v1" or expires < (now if now is not None else time.time()):
        return False
    return hmac.compare_digest(mac, _mac(key, tenant, client_id, expires))


def _mac(key: bytes, tenant: str, client_id: str, expires: int) -> str:
    message = f"{tenant}\n{client_id}\n{expires}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()
