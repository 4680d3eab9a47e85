"""The frames a live page is sent (documented in tenants/portal/live.py), made from what the
broker sends the tenant's shared subscription, and the per-page rate limit."""

from __future__ import annotations

import base64
import json
from typing import Any

PAYLOAD_PREVIEW = 4096  # bytes of each payload shown
ONLINE_TOPIC = "$SYS/broker/clients/online"
SYS_PREFIX = "$SYS/broker/"
PRESENCE_TOPICS = {"$events/client_connected": True, "$events/client_disconnected": False}


def encode(frame: dict[str, Any]) -> str:
    return json.dumps(frame)


def status(connected: bool, error: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "status", "connected": connected}
    if error is not None:
        frame["error"] = error
    return frame


def platform_frame(topic: str, payload: bytes) -> dict[str, Any] | None:
    """The frame every page of the tenant gets for one of the broker's own messages (`$SYS`
    counters, presence), or None for any other topic."""
    if topic == ONLINE_TOPIC:
        try:
            online = json.loads(payload)["devices"]
        except (ValueError, KeyError, TypeError):
            return None
        return {"type": "presence", "online": online} if isinstance(online, list) else None
    if topic.startswith(SYS_PREFIX):
        name = topic[len(SYS_PREFIX) :]
        return {"type": "sys", "name": name, "value": payload.decode("utf-8", "replace")}
    online = PRESENCE_TOPICS.get(topic)
    if online is None:
        return None
    try:
        event = json.loads(payload)
        device = event["username"].split("/", 1)[1]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return {"type": "presence", "device": device, "online": online, "at": event.get("ts")}


def message_frame(topic: str, payload: bytes, qos: int, retain: bool, now: float) -> dict[str, Any]:
    """A watched message as a page shows it: text when it is UTF-8, else base64, cut short."""
    preview = payload[:PAYLOAD_PREVIEW]
    try:
        text, binary = preview.decode("utf-8"), False
    except UnicodeDecodeError:
        text, binary = base64.b64encode(preview).decode(), True
    return {
        "type": "message",
        "topic": topic,
        "payload": text,
        "binary": binary,
        "size": len(payload),
        "qos": qos,
        "retain": retain,
        "at": int(now * 1000),
    }


class PageRate:
    """At most `per_second` messages a second shown to one page; the rest counted, and the count
    told to the page (a `dropped` frame) once the next second begins."""

    __slots__ = ("per_second", "_window", "_shown", "_dropped")

    def __init__(self, per_second: int) -> None:
        self.per_second = per_second
        self._window, self._shown, self._dropped = 0, 0, 0

    def admit(self, now: float) -> tuple[bool, int]:
        """Whether to show a message arriving `now` (wall clock: the seconds the `at` of the frames
        counts in), and how many went unshown in the second before, to tell the page first."""
        second, untold = int(now), 0
        if second != self._window:
            untold = self._dropped
            self._window, self._shown, self._dropped = second, 0, 0
        if self._shown >= self.per_second:
            self._dropped += 1
            return False, untold
        self._shown += 1
        return True, untold
