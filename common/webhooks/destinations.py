"""Where a tenant's webhook may go: public addresses, and what the operator allow-lists.

Tenants choose webhook URLs, and the call is made from inside the platform's network, so a URL
aimed at a loopback, private, link-local (the cloud's metadata service at 169.254.169.254),
multicast or otherwise non-public address would let a tenant reach what only the platform should
(its own API, its database, the metadata service). Every process refuses them by default, the
embedded `make run` too (its demo calls no webhook):

- at save time by the URL's literal host (`url_problem`: an IP literal, `localhost`);
- at every call by every address the name resolves to (`vet`): if any is refused the call is
  refused before a packet is sent, and the connection then goes to a vetted address, pinned for
  the request (no second resolution a DNS rebinding could change). Redirects are never followed.

IPv6 forms that carry an IPv4 address are judged by the IPv4 address inside: IPv4-mapped
`::ffff:a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64
`64:ff9b::/96`, 6to4 `2002::/16`; the local-use NAT64 prefix `64:ff9b:1::/48` and Teredo
`2001::/32` (whose client address is hidden) are refused outright.

An operator allows non-public destinations with `WEBHOOK_ALLOW`: a comma-separated list of
networks, each optionally with a port or a port range (`10.1.2.0/24`, `127.0.0.1:9000`,
`[::1]:9000-9099`). `WEBHOOK_ALLOW_PRIVATE=1` (an older switch) allows every one of them; `0` or
unset is the default above.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

ALLOW_VARIABLE = "WEBHOOK_ALLOW"
ALLOW_PRIVATE_VARIABLE = "WEBHOOK_ALLOW_PRIVATE"
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")
_COMPATIBLE = ipaddress.ip_network("::/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")


class RefusedDestination(ConnectionError):
    """A webhook destination the platform does not call."""


@dataclass(frozen=True)
class Allowed:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    low: int = 0
    high: int = 65535

    def covers(self, ip: IPAddress, port: int) -> bool:
        return (
            ip.version == self.network.version
            and ip in self.network
            and (self.low <= port <= self.high)
        )


_ENTRY = re.compile(r"^\[?(?P<net>[^\]]+?)\]?(?::(?P<low>\d+)(?:-(?P<high>\d+))?)?$")


def parse_allow(text: str) -> tuple[Allowed, ...]:
    """`WEBHOOK_ALLOW`'s entries; ValueError naming a bad one."""
    entries = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        # `::1` alone is an address, not `:` `:1`: bracket IPv6 to give it a port.
        match = _ENTRY.match(item) if (item.startswith("[") or item.count(":") <= 1) else None
        net, low, high = (
            (match["net"], match["low"], match["high"]) if match else (item, None, None)
        )
        try:
            network = ipaddress.ip_network(net, strict=False)
        except ValueError:
            raise ValueError(f"{ALLOW_VARIABLE}: {item!r} is not a network[:port[-port]]") from None
        first = int(low) if low else 0
        last = int(high) if high else (first if low else 65535)
        if not 0 <= first <= last <= 65535:
            raise ValueError(f"{ALLOW_VARIABLE}: {item!r} has a bad port range")
        entries.append(Allowed(network, first, last))
    return tuple(entries)


@lru_cache(maxsize=8)
def _allow_list(text: str) -> tuple[Allowed, ...]:
    return parse_allow(text)


def operator_allows() -> tuple[bool, tuple[Allowed, ...]]:
    """(every non-public address allowed, the allow-list), from the environment."""
    everything = os.environ.get(ALLOW_PRIVATE_VARIABLE, "").strip().lower() in ("1", "true", "yes")
    return everything, _allow_list(os.environ.get(ALLOW_VARIABLE, ""))


def _kind(ip: IPAddress) -> str | None:
    """Why `ip` is not public (its kind), or None when it is."""
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_unspecified:
        return "unspecified"
    if not ip.is_global:
        return "private or reserved"
    return None


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (the forms above), if any."""
    if ip.version != 6:
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _TRANSLATED or ip in _NAT64:
        return low32
    if ip in _COMPATIBLE and int(ip) > 1:  # not :: nor ::1
        return low32
    if ip in _SIXTOFOUR:
        return ip.sixtofour
    return None


def address_problem(address: str | IPAddress) -> str | None:
    """Why a webhook may not call this address (not allow-listed here), or None if public."""
    try:
        ip = ipaddress.ip_address(str(address).split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if ip.version == 6 and (ip in _NAT64_LOCAL or ip in _TEREDO):
        form = "NAT64 local-use" if ip in _NAT64_LOCAL else "Teredo"
        return f"{ip} is a {form} address (it may hide any IPv4 address)"
    inner = embedded_ipv4(ip)
    if inner is not None:
        kind = _kind(inner)
        if kind is not None:
            return f"{ip} carries {inner}, {_article(kind)} {kind} address"
        return None
    kind = _kind(ip)
    if kind is None:
        return None
    return f"{ip} is {_article(kind)} {kind} address"


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeiou" else "a"


def refusal(problem: str) -> str:
    return (
        f"{problem}: webhooks call public addresses only (an operator may allow one with "
        f"{ALLOW_VARIABLE})"
    )


def destination_problem(
    address: str | IPAddress,
    port: int,
    everything: bool = False,
    allowed: tuple[Allowed, ...] = (),
) -> str | None:
    """Why a call may not go to (address, port), given what the operator allows, or None."""
    problem = address_problem(address)
    if problem is None or everything:
        return None
    ip = ipaddress.ip_address(str(address).split("%", 1)[0])
    inner = embedded_ipv4(ip)
    for entry in allowed:
        if entry.covers(ip, port) or (inner is not None and entry.covers(inner, port)):
            return None
    return refusal(problem)


def url_problem(url: str) -> str | None:
    """Why a webhook URL may not be saved, judged by its literal host (a name is judged at each
    call by the addresses it resolves to), or None."""
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "the URL's port is not a number from 0 to 65535"
    everything, allowed = operator_allows()
    if host in LOCAL_NAMES or host.endswith(".localhost"):
        if everything or any(e.network.is_loopback for e in allowed):
            return None
        return refusal(f"{host} is this machine")
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None  # a name: judged by its addresses when called
    return destination_problem(host, port, everything, allowed)


def vet(host: str, port: int, addresses: list[str]) -> list[str]:
    """The addresses a call to `host` may connect to, from what it resolved to; refused as a
    whole (RefusedDestination, naming no address) if any of them is not allowed: a name that
    resolves inside the platform's network is refused, whatever else it also resolves to."""
    everything, allowed = operator_allows()
    if not addresses:
        raise RefusedDestination(no_public_address(host))
    for address in addresses:
        problem = destination_problem(address, port, everything, allowed)
        if problem is not None:
            try:
                ipaddress.ip_address(host.split("%", 1)[0])
            except ValueError:  # a name: refused without the address it resolved to
                raise RefusedDestination(no_public_address(host)) from None
            raise RefusedDestination(problem)
    return list(dict.fromkeys(addresses))


def no_public_address(host: str) -> str:
    """The refusal of a name, whether it resolves inside the platform's network or not at all:
    one answer for both, so a tenant cannot map the platform's internal names through it."""
    return (
        f"{host} has no public address: webhooks call public addresses only (an operator may "
        f"allow others with {ALLOW_VARIABLE})"
    )
