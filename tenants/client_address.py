"""The client's address as a request saw it: the TCP peer's, unless that peer is one of the
`TRUSTED_PROXIES`, then the last hop of `X-Forwarded-For` that is not one. What the login
throttles key on, what the audit log and the access log record."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings


@lru_cache(maxsize=16)
def _networks(proxies: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(p.strip(), strict=False) for p in proxies if p.strip())


def _trusted(address: str) -> bool:
    proxies = tuple(getattr(settings, "TRUSTED_PROXIES", ()) or ())
    if not proxies:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _networks(proxies))


def client_address(meta: dict) -> str:
    """The client's address: the peer, unless the peer is a trusted proxy."""
    address = meta.get("REMOTE_ADDR", "") or ""
    if not _trusted(address):
        return address
    forwarded = [a.strip() for a in meta.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
    for hop in reversed(forwarded):
        if not _trusted(hop):
            return hop
    return address
