"""An alarm's state per key, as a machine of pure functions: the live job and the preview over
history run this one, so they give the same transitions for the same messages.

States: `normal → pending → active → acknowledged → normal`.

- A message whose raise condition holds makes a normal key `pending` (or `active` at once when
  the alarm has no `for` duration); `active` when the condition has held `raise_for` seconds —
  the transition's time is that instant, whenever it is noticed; a message that does not raise
  meanwhile sends it back to `normal` (`cancel`).
- An active (or acknowledged) key clears when its clear condition has held `clear_for` seconds
  (at once when 0); a message whose clear condition does not hold starts that count again.
- No data: a key that sent nothing for `no_data` seconds becomes `active` (cause `no_data`),
  and its next message clears it before it is read as usual.
- `acknowledged`: a person acknowledged an active key; it clears as an active one does.
- Re-notification: while `active` (not acknowledged), a `renotify` notice every `renotify`
  seconds after the raise.

Time is the messages' (the archive's `ts`, seconds): the machine never reads a clock. Timers are
fired by `advance(…, now)`, which the caller drives (the next message's time, a tick of the live
job, the end of a preview's range); a message older than what the key has seen is read at the
key's time (late data cannot move a transition into the past).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NORMAL, PENDING, ACTIVE, ACKNOWLEDGED = "normal", "pending", "active", "acknowledged"
STATES = (NORMAL, PENDING, ACTIVE, ACKNOWLEDGED)
CONDITION, NO_DATA = "condition", "no_data"
# What a transition is: its event. Notifications go on raise, acknowledge, clear and renotify.
PEND, CANCEL, RAISE, ACKNOWLEDGE, CLEAR, RENOTIFY = (
    "pending",
    "cancel",
    "raise",
    "acknowledge",
    "clear",
    "renotify",
)
EVENTS = (PEND, CANCEL, RAISE, ACKNOWLEDGE, CLEAR, RENOTIFY)


@dataclass(slots=True)
class KeyState:
    """One key's state (what the live job keeps per key, checkpointed)."""

    status: str = NORMAL
    since: float = 0.0  # when `status` began
    clock: float = 0.0  # the latest time this key has seen
    pending_since: float | None = None  # the raise condition has held since (pending)
    clearing_since: float | None = None  # the clear condition has held since (active, acked)
    last_seen: float | None = None  # its last message (no data counts from here)
    value: Any = None  # the last message's value
    cause: str | None = None  # why it is active: CONDITION or NO_DATA
    raised_at: float | None = None  # when it last became active
    notified_at: float | None = None  # the raise or last re-notification


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of a key's state (or a re-notification, `before == after`)."""

    key: str
    event: str
    before: str
    after: str
    at: float
    value: Any = None
    cause: str | None = None
    message_id: str | None = None  # the message that made it (none for a timer's)
    by: str | None = None  # who acknowledged


@dataclass(frozen=True, slots=True)
class Timing:
    """An alarm's durations, in seconds (`None`: no such timer)."""

    raise_for: float = 0.0
    clear_for: float = 0.0
    no_data: float | None = None
    renotify: float | None = None


def seed(state: KeyState, at: float) -> None:
    """A key expected to send (a device of the tenant) that has not yet: no data counts from
    `at`, the time it began to be watched."""
    if state.last_seen is None:
        state.last_seen = at
        state.clock = max(state.clock, at)


def _next_timer(state: KeyState, timing: Timing) -> tuple[float, str] | None:
    timers: list[tuple[float, str]] = []
    if state.status == PENDING and state.pending_since is not None:
        timers.append((state.pending_since + timing.raise_for, RAISE))
    if state.status in (ACTIVE, ACKNOWLEDGED) and state.clearing_since is not None:
        timers.append((state.clearing_since + timing.clear_for, CLEAR))
    if timing.no_data is not None and state.last_seen is not None:
        if state.status in (NORMAL, PENDING):
            # never before the state began (a key cleared by a timer after a long silence)
            timers.append((max(state.last_seen + timing.no_data, state.since), NO_DATA))
    if timing.renotify and state.status == ACTIVE and state.notified_at is not None:
        timers.append((state.notified_at + timing.renotify, RENOTIFY))
    return min(timers) if timers else None


def next_due(state: KeyState, timing: Timing) -> float | None:
    """When the key's next timer is due (None: it has none): `advance` needs calling then."""
    due = _next_timer(state, timing)
    return None if due is None else due[0]


def _move(
    key: str,
    state: KeyState,
    event: str,
    after: str,
    at: float,
    message_id: str | None = None,
    by: str | None = None,
) -> Transition:
    before = state.status
    if after != before:
        state.status, state.since = after, at
    if event == RAISE:
        state.raised_at = state.notified_at = at
        state.clearing_since = None
    if after in (NORMAL, PENDING):
        state.cause = None
        state.clearing_since = None
        state.notified_at = None
    if after != PENDING:
        state.pending_since = None
    return Transition(key, event, before, after, at, state.value, state.cause, message_id, by)


def advance(key: str, state: KeyState, timing: Timing, now: float) -> list[Transition]:
    """Fire every timer of `state` due at or before `now`, each at its own time, in order."""
    out: list[Transition] = []
    while (due := _next_timer(state, timing)) is not None and due[0] <= now:
        at, what = due
        if what == RAISE:
            state.cause = CONDITION
            out.append(_move(key, state, RAISE, ACTIVE, at))
        elif what == NO_DATA:
            if state.status == PENDING:
                out.append(_move(key, state, CANCEL, NORMAL, at))
            state.cause = NO_DATA
            out.append(_move(key, state, RAISE, ACTIVE, at))
        elif what == CLEAR:
            out.append(_move(key, state, CLEAR, NORMAL, at))
        else:  # RENOTIFY
            state.notified_at = at
            out.append(_move(key, state, RENOTIFY, state.status, at))
    state.clock = max(state.clock, now)
    return out


def message(
    key: str,
    state: KeyState,
    timing: Timing,
    at: float,
    raised: bool,
    cleared: bool,
    value: Any = None,
    message_id: str | None = None,
) -> list[Transition]:
    """A message of `key` at `at` that raises and/or clears (the definition's reading)."""
    out = advance(key, state, timing, at)
    at = max(at, state.clock)
    state.last_seen = at
    state.value = value
    if state.status in (ACTIVE, ACKNOWLEDGED) and state.cause == NO_DATA:
        out.append(_move(key, state, CLEAR, NORMAL, at, message_id))  # data again
    status = state.status
    if status == NORMAL:
        if raised:
            if timing.raise_for <= 0:
                state.cause = CONDITION
                out.append(_move(key, state, RAISE, ACTIVE, at, message_id))
            else:
                out.append(_move(key, state, PEND, PENDING, at, message_id))
                state.pending_since = at
    elif status == PENDING:
        if not raised:
            out.append(_move(key, state, CANCEL, NORMAL, at, message_id))
    elif cleared:  # active or acknowledged
        if state.clearing_since is None:
            state.clearing_since = at
        if timing.clear_for <= 0:
            out.append(_move(key, state, CLEAR, NORMAL, at, message_id))
    else:
        state.clearing_since = None
    return out


def acknowledge(key: str, state: KeyState, timing: Timing, at: float, by: str) -> list[Transition]:
    """A person acknowledged the key's alarm at `at`: the timers due by then fire first; then
    an active alarm moves (anything else stays as it is)."""
    out = advance(key, state, timing, at)
    if state.status != ACTIVE:
        return out
    return [*out, _move(key, state, ACKNOWLEDGE, ACKNOWLEDGED, max(at, state.clock), by=by)]
