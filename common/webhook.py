"""The rules' webhook call: a signed JSON POST, retried with back-off. One implementation for the
rule jobs (spark/rules/actions.py) and the replay of dead letters (the control plane).

`X-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>` signs the exact body sent. Network
errors, 5xx and 429 are retried (`attempts`, back-off doubling from `backoff` seconds); any other
4xx is final, and so is a redirect (never followed: it could lead anywhere).

Tenants choose the URL, and the call is made from inside the platform's network: a URL aimed at
a loopback, private, link-local (the cloud's metadata service at 169.254.169.254) or otherwise
non-public address would let a tenant reach what only the platform should. A deployed platform
refuses them (`WEBHOOK_ALLOW_PRIVATE=0`, which `infra/terraform` sets for every process): at save
time by the URL's literal host (`url_problem`), and at every call by the address actually
connected to (so a name that resolves, or later re-resolves, to such an address is refused too).
Unset, they are allowed: on the embedded single-machine platform (`make run`) the receivers a
user tries first are on that machine, and it is nobody else's network.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

ALLOW_PRIVATE_VARIABLE = "WEBHOOK_ALLOW_PRIVATE"
_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def private_allowed() -> bool:
    """The operator's choice: webhooks may call non-public addresses (unless set to 0)."""
    setting = os.environ.get(ALLOW_PRIVATE_VARIABLE, "").strip().lower()
    return setting not in ("0", "false", "no")


def address_problem(address: str) -> str | None:
    """Why a webhook may not call this IP address, or None if it is a public one."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        kind = "a loopback"
    elif ip.is_link_local:
        kind = "a link-local"
    elif ip.is_multicast:
        kind = "a multicast"
    elif ip.is_unspecified:
        kind = "an unspecified"
    elif not ip.is_global:
        kind = "a private or reserved"
    else:
        return None
    return (
        f"{ip} is {kind} address: webhooks call public addresses only "
        f"(the platform sets {ALLOW_PRIVATE_VARIABLE}=0)"
    )


def url_problem(url: str, allow_private: bool | None = None) -> str | None:
    """Why a webhook URL may not be saved (its literal host only: names are checked at each
    call, by the address they resolve to), or None."""
    if allow_private is None:
        allow_private = private_allowed()
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".").lower()
    if allow_private or not host:
        return None
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return (
            f"{host} is this machine: webhooks call public addresses only "
            f"(the platform sets {ALLOW_PRIVATE_VARIABLE}=0)"
        )
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None  # a name: judged by its address when called
    return address_problem(host)


class RefusedDestination(ConnectionError):
    pass


def _checked_connection(
    address: tuple[str, int], timeout: Any = None, source_address: Any = None
) -> socket.socket:
    """`socket.create_connection`, then the address reached is judged before a byte is sent
    (before TLS too): whatever the name resolved to, this is where the request would go."""
    sock = socket.create_connection(address, timeout, source_address)
    problem = address_problem(sock.getpeername()[0])
    if problem is not None:
        sock.close()
        raise RefusedDestination(problem)
    return sock


def _guarded(base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
    class Guarded(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._create_connection = _checked_connection

    return Guarded


_GUARDED = {
    "http": _guarded(http.client.HTTPConnection),
    "https": _guarded(http.client.HTTPSConnection),
}
_PLAIN = {"http": http.client.HTTPConnection, "https": http.client.HTTPSConnection}


@dataclass(frozen=True)
class WebhookResult:
    ok: bool
    error: str = ""
    attempts: int = 1


def output_json(output: Any) -> str:
    return json.dumps(output, separators=(",", ":"), default=str)


def post_signed(
    url: str,
    secret: str,
    output: Any,
    *,
    rule_id: int,
    attempts: int = 4,
    backoff: float = 0.25,
    timeout: float = 5.0,
    allow_private: bool | None = None,
    body_text: str | None = None,
) -> WebhookResult:
    """POST `output` as JSON to `url`, signed with `secret`; `allow_private` defaults to the
    operator's `WEBHOOK_ALLOW_PRIVATE`. `body_text`, when given, is sent instead (the exact
    JSON an earlier call sent: a dead letter's replay)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return WebhookResult(False, f"webhook: invalid url {url!r}")
    if allow_private is None:
        allow_private = private_allowed()
    problem = url_problem(url, allow_private)
    if problem is not None:
        return WebhookResult(False, f"webhook: {problem}")
    body = (output_json(output) if body_text is None else body_text).encode()
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "mqtt-platform-rules/1",
        "X-Signature-256": f"sha256={signature}",
        "X-Rule-Id": str(rule_id),
    }
    connection_class = (_PLAIN if allow_private else _GUARDED)[parts.scheme]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    error = ""
    attempts = max(1, attempts)
    for attempt in range(1, attempts + 1):
        connection = connection_class(parts.hostname, parts.port, timeout=timeout)
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            response.read(1024)
            status = response.status
        except RefusedDestination as exc:
            return WebhookResult(False, f"webhook: {exc}", attempt)  # final: it stays refused
        except Exception as exc:
            error = f"webhook: {type(exc).__name__}: {exc}"
        else:
            if 200 <= status < 300:
                return WebhookResult(True, attempts=attempt)
            error = f"webhook: HTTP {status}"
            if 300 <= status < 400:
                return WebhookResult(False, f"{error} (redirects are not followed)", attempt)
            if status < 500 and status != 429:
                return WebhookResult(False, error, attempt)
        finally:
            connection.close()
        if attempt < attempts:
            time.sleep(backoff * 2 ** (attempt - 1))
    return WebhookResult(False, error[:500], attempts)
