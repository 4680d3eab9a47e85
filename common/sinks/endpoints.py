"""Where a sink may connect: vetted exactly as a webhook's destination is.

A tenant names the sink's far end (an S3 or SQS endpoint, a database host, a broker, a URL) and
the platform connects to it from inside its own network, so the same rule applies as for
webhooks (`common.webhooks.destinations`): every address the host resolves to must be public or
allowed by the operator (`WEBHOOK_ALLOW`), judged at every connection, not only when the action
was saved. `vetted` resolves and vets; writers that open their own sockets (Postgres through
libpq's `hostaddr`, the MQTT bridge) then connect to a vetted address only, so no second
resolution can change where the packets go. boto3 resolves the endpoint again itself: for the
AWS types the check runs before every send, and a name that changes its answer in between
(DNS rebinding) is the one gap left.

A refusal is words, never an address the name resolved to (a tenant learns nothing of the
platform's network), and worth retrying: an operator may allow it later.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from common.webhooks.destinations import RefusedDestination, no_public_address, vet

__all__ = ["RefusedDestination", "url_host_port", "vetted"]


def _words(text: str) -> str:
    return text.replace("webhooks call", "sinks connect to")


def vetted(host: str, port: int) -> list[str]:
    """The addresses of `host` a sink may connect to (at least one); RefusedDestination in
    words if the name does not resolve or any address it resolves to is not allowed."""
    name = host.strip().strip("[]")
    if not name or name.startswith("/"):
        raise RefusedDestination(f"'{host}' is not a host name or an address")
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise RefusedDestination(_words(no_public_address(name))) from None
    try:
        return vet(name, port, [str(info[4][0]) for info in infos])
    except RefusedDestination as exc:
        raise RefusedDestination(_words(str(exc))) from None


def url_host_port(url: str) -> tuple[str, int]:
    """(host, port) a URL connects to; ValueError in words for one that names no host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"'{url}' is not an http(s) URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ValueError(f"the port of '{url}' is not a number from 0 to 65535") from None
    return parts.hostname, port
