"""Where a client's session came from and went to, from the moment the cluster learns it to the
client event that records it (`journey.JourneyRecorder`): "where did my client go?".

A takeover is learnt before its events happen, by someone other than the connection whose event
names it:

- at the node a client connects to, its claim (`data_plane.cluster.sessions`) learns the
  previous owner from Redis (`SET … GET`) before the session opens: `arriving` notes it (or
  clears an older note, so that a note never outlives the CONNECT it was meant for) and the
  `connected` event takes it;
- at the node that lets the session go, the cluster notes the claimer (`leaving`) just before it
  closes the connection with 0x8E, and the `taken_over` event takes it;
- within one node (the broker takes an older connection over in `open_session`, unseen by the
  cluster) the `taken_over` event finds no note: it was taken here, and it notes this node as
  where the next `connected` of the client id came from.

Notes are kept only until taken, at most `HORIZON` seconds (a CONNECT that failed after its
claim never takes its own) and `MOST` at once: one dict per connect or takeover, nothing per
message.
"""

from __future__ import annotations

import time

HORIZON = 30.0  # seconds a note waits for its event (a claim waits 2 s, a restore a few more)
MOST = 10_000  # notes at once; the oldest go first
# `leaving` where no node took the client id: this node was counted dead (a survivor holds its
# sessions now; which one, Redis does not say).
NOBODY = ""


class Moves:
    def __init__(self) -> None:
        self._came: dict[tuple[str, str], tuple[str, float]] = {}
        self._went: dict[tuple[str, str], tuple[str, float]] = {}

    def arriving(self, tenant: str, client_id: str, from_node: str | None) -> None:
        """The claim of a CONNECT here: the node it takes the session over from, or None."""
        key = (tenant, client_id)
        if from_node is None:
            self._came.pop(key, None)
        else:
            _note(self._came, key, from_node)

    def leaving(self, tenant: str, client_id: str, to_node: str) -> None:
        """The cluster is about to close this client's connection here for `to_node`."""
        _note(self._went, (tenant, client_id), to_node)

    def came_from(self, tenant: str, client_id: str) -> str | None:
        """For a `connected` event: the node its session was taken over from, if any."""
        return _take(self._came, (tenant, client_id))

    def went_to(self, tenant: str, client_id: str, here: str) -> str | None:
        """For a `taken_over` event: the node that took it (`NOBODY`: none said), or `here`
        when the cluster noted nothing (a takeover within this node, which then notes `here`
        for the next `connected` of the client id)."""
        key = (tenant, client_id)
        node = _take(self._went, key)
        if node is None:
            _note(self._came, key, here)
            return here
        return node


def _note(notes: dict[tuple[str, str], tuple[str, float]], key: tuple[str, str], node: str) -> None:
    notes.pop(key, None)  # re-inserted last: the dict stays oldest first
    notes[key] = (node, time.monotonic())
    if len(notes) > MOST:
        del notes[next(iter(notes))]


def _take(notes: dict[tuple[str, str], tuple[str, float]], key: tuple[str, str]) -> str | None:
    note = notes.pop(key, None)
    if note is None or time.monotonic() - note[1] > HORIZON:
        return None
    return note[0]
