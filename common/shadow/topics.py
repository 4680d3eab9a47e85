"""The Device Shadow service's reserved topics, inside a tenant's namespace:

    $aws/things/{thing}/shadow/{get,update,delete}                 requests (classic shadow)
    $aws/things/{thing}/shadow/name/{shadow}/{get,update,delete}   requests (named shadow)
    …/{operation}/accepted, …/{operation}/rejected                 replies to the requester
    …/update/delta, …/update/documents                             events for every subscriber

`{thing}` is a device of the tenant. A thing's reserved topics (`$aws/things/{thing}/…`) are its
own: a device may use its own without any ACL rule, another thing's only where an ACL rule names
them (`common.access.acl`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "$aws/things/"
GET, UPDATE, DELETE = "get", "update", "delete"
OPERATIONS = (GET, UPDATE, DELETE)
ACCEPTED, REJECTED, DELTA, DOCUMENTS = "accepted", "rejected", "delta", "documents"
REPLIES = {
    GET: (ACCEPTED, REJECTED),
    UPDATE: (ACCEPTED, REJECTED, DELTA, DOCUMENTS),
    DELETE: (ACCEPTED, REJECTED),
}
# AWS's shadow names: letters, digits, `:`, `_`, `-`, at most 64 (thing names are device names).
SHADOW_NAME = re.compile(r"^[A-Za-z0-9:_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ShadowTopic:
    thing: str
    shadow: str  # "": the classic (unnamed) shadow
    operation: str  # get | update | delete
    reply: str = ""  # "": a request; else accepted | rejected | delta | documents

    @property
    def prefix(self) -> str:
        return shadow_prefix(self.thing, self.shadow)

    def reply_topic(self, reply: str) -> str:
        return f"{self.prefix}/{self.operation}/{reply}"


def shadow_prefix(thing: str, shadow: str = "") -> str:
    base = f"{PREFIX}{thing}/shadow"
    return f"{base}/name/{shadow}" if shadow else base


def parse(topic: str) -> ShadowTopic | None:
    """The shadow topic `topic` is, or None (not a shadow topic, or a malformed one)."""
    if not topic.startswith(PREFIX):
        return None
    levels = topic.split("/")
    if len(levels) < 5 or levels[3] != "shadow" or not levels[2]:
        return None
    rest = levels[4:]
    shadow = ""
    if rest[0] == "name":
        if len(rest) < 3 or not SHADOW_NAME.match(rest[1]):
            return None
        shadow, rest = rest[1], rest[2:]
    operation = rest[0]
    if operation not in REPLIES or len(rest) > 2:
        return None
    reply = rest[1] if len(rest) == 2 else ""
    if reply and reply not in REPLIES[operation]:
        return None
    return ShadowTopic(levels[2], shadow, operation, reply)


def thing_of(levels: list[str]) -> str | None:
    """The thing whose reserved level `$aws/things/{thing}/…` these topic (or filter) levels
    name; None when they are not a thing's reserved topic. The thing level may be a wildcard."""
    if len(levels) >= 3 and levels[0] == "$aws" and levels[1] == "things" and levels[2]:
        return levels[2]
    return None
