"""Hook points: the rest of the system observes (and may steer) the broker without touching it.

Callbacks run in priority order (higher first), synchronously on the event loop: keep them cheap
and hand slow work to a task. `message.publish` callbacks receive the message and return it
(possibly changed) or None to drop it. The cluster (data_plane.cluster) plugs in here too, never
by replacing a method of the broker: `session.adopted` sees every session the broker wires
(opened or restored) before it is routed to, and `client.redirect` may send a CONNECT elsewhere
(the first answer that is not None wins, see `first`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from common.mqtt.packets import Connect
from data_plane.broker.auth import AuthResult
from data_plane.broker.message import Message
from data_plane.broker.stats import Redirect

# A hook's callback: each hook point passes its own arguments (listed above), and what it
# answers matters only to `first` and `filter_publish`.
Hook = Callable[..., Any]

HOOK_NAMES = (
    "client.connected",
    "client.disconnected",
    "session.subscribed",
    "session.unsubscribed",
    "message.publish",
    "message.delivered",
    "message.acked",
    "message.dropped",
    "quota.exceeded",  # a limit refused something (a message or a connection was not taken)
    "quota.throttled",  # a limit slowed something down (nothing was refused)
    "client.refused",  # data_plane.broker.refused: what a connection refused, and why
    "session.expired",  # a session ended, no client having resumed it within its expiry
    "session.will",  # a will went out: (session or None, will, Published)
    "shadow.changed",  # data_plane.shadows: an accepted change of a device shadow
    "session.adopted",  # Broker.adopt wired a session (opened or restored): (session,)
    "session.replayed",  # a replay ended: (session, filter, start (Unix time), messages sent)
    "client.redirect",  # (connect, auth result) -> stats.Redirect or None: see `first`
)


class Hooks:
    def __init__(self) -> None:
        self._hooks: dict[str, list[tuple[int, Hook]]] = defaultdict(list)

    def add(self, name: str, callback: Hook, priority: int = 0) -> None:
        if name not in HOOK_NAMES:
            raise ValueError(f"unknown hook {name!r}; known: {', '.join(HOOK_NAMES)}")
        self._hooks[name].append((priority, callback))
        self._hooks[name].sort(key=lambda item: -item[0])

    def remove(self, name: str, callback: Hook) -> None:
        self._hooks[name] = [(p, c) for p, c in self._hooks[name] if c is not callback]

    def has(self, name: str) -> bool:
        return bool(self._hooks.get(name))

    def run(self, name: str, *args: object) -> None:
        for _, callback in self._hooks.get(name, ()):
            callback(*args)

    def first(self, name: str, *args: object) -> Any:
        """The first answer that is not None, in priority order (None when all pass)."""
        for _, callback in self._hooks.get(name, ()):
            answer = callback(*args)
            if answer is not None:
                return answer
        return None

    def redirect(self, connect: Connect, result: AuthResult) -> Redirect | None:
        """The `client.redirect` hooks' answer for a CONNECT (the broker's default redirect)."""
        answer: Redirect | None = self.first("client.redirect", connect, result)
        return answer

    def filter_publish(self, message: Message, *context: object) -> Message | None:
        for _, callback in self._hooks.get("message.publish", ()):
            changed: Message | None = callback(message, *context)
            if changed is None:
                return None
            message = changed
        return message
