"""User names as AWS IoT's device SDKs send them.

The SDKs append their metrics to the MQTT user name as a query string: `?SDK=Python&Version=1.28.0`
when the application sets none (as with a client certificate, where AWS needs no user name), or
`{name}?SDK=…` after the application's own. AWS IoT reads the part before `?` as the user name, and
so does the broker: no tenant slug or device name can hold a `?`, so nothing that could name a
device is lost, and a device built for AWS connects with its certificate as it did there.
"""

from __future__ import annotations

import dataclasses

from common.mqtt.packets import Connect


def without_metrics(username: str | None) -> str | None:
    """The user name without an SDK's `?…` query string (None when nothing is left)."""
    if not username or "?" not in username:
        return username
    return username.split("?", 1)[0] or None


def as_sent_by_aws_sdk(connect: Connect) -> Connect:
    """`connect` with its user name read as AWS IoT reads it (the packet itself unchanged)."""
    username = without_metrics(connect.username)
    if username == connect.username:
        return connect
    return dataclasses.replace(connect, username=username)
