"""What every room of the node shares: who the node is and its connections to the bus, and the
narrow views one room has of another's state (as protocols: a room names what it reads, and a
test passes a fake for it).

- `Bus`: the node's id, its Redis connections (`redis`; `reader` for the blocking stream
  reads), its keys (`keys`), the heartbeat, and `control` (a message to another node's stream);
- `Peers`: who else lives (`alive`, renewed at each beat) and which dead nodes no survivor has
  taken the place of yet (`dying`): `membership` owns them, the others read them;
- `Drop`: counts messages this node could not keep (`Cluster.dropped`, by reason).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from data_plane.cluster.keys import Keys

STREAM_MAXLEN = 10_000  # entries kept per node's stream (each a batch): see `forward`

Drop = Callable[[str, int], None]  # (reason, messages): lost here, counted for /metrics


class Peers(Protocol):
    """The other nodes as this one sees them (owned by `membership.Membership`)."""

    alive: dict[str, dict[str, object]]  # live node -> its description (a new dict every beat)
    dying: set[str]  # dead, still forwarded to: a survivor drains their streams (`inherit`)


@dataclass(eq=False)
class Bus:
    """The node on the bus (see the module's docstring)."""

    node_id: str
    keys: Keys
    redis: Any  # redis.asyncio.Redis (tests pass fakes of the few commands a room uses)
    reader: Any  # the same, for XREADGROUP's blocking reads
    heartbeat: float
    url: str = ""

    async def control(self, node_id: str, body: Mapping[str, object]) -> None:
        """A control message (session takeover) to another node, on its forward stream."""
        await self.redis.xadd(
            self.keys.stream(node_id),
            {b"c": encode_control(body)},
            maxlen=STREAM_MAXLEN,
            approximate=True,
        )


def encode_control(body: Mapping[str, object]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
