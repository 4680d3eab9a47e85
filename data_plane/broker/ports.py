"""The broker's ports: what each side of the broker core may ask of the other, as protocols,
and what a publish returns.

The broker and the session never import the connection: they talk to whatever stands for a
client through these narrow interfaces (the connection satisfies both; tests may pass fakes).

- `Outlet`: what a session needs of its client to deliver: what the client negotiated (version,
  Receive Maximum, Maximum Packet Size, topic aliases), whether it can take more now, and `send`.
- `Client`: what the broker sees of a live connection: who it is, its session, and the three
  things the broker may do to it (take it over, disconnect it, re-apply its tenant's policy).

What the broker is plugged into is given to it once, at construction (`Ports`); it never learns
of storage or the cluster any other way, and neither ever sets an attribute of the broker (the
cluster steers it through hooks, `session.adopted` and `client.redirect`: data_plane.broker.hooks):

- `persistence` (`SessionStorage`): persistent sessions and their queues
  (`data_plane.storage.persistence`);
- `retained_storage` (`RetainedStorage`): a copy of every retained change
  (`data_plane.storage.retained_delayed`);
- `delayed_storage` (`DelayedStorage`): `$delayed/{seconds}/...` publishes kept until due (same);
- `cluster` (`Cluster`): the other broker processes (data_plane.cluster): it routes each
  publish here (`Broker.route`) and once to each other node with a matching route, picks one
  node per shared group, delivers what other nodes forward through `Broker.route`, follows the
  broker's subscriptions through `Router.on_route`, and claims a client id for a CONNECT;
- `archive` (`Archive`): records every routed message (`data_plane.storage.archive_hook`); a
  direct call from `Broker.publish`, not a `message.publish` hook, because the hooks' dispatch
  cost the loop more than the recording itself;
- `journey` (`Journey`): records each PUBLISH's outcome (`data_plane.observability.journey`),
  called by the connection's inbound side, which knows the packet and what became of it;
- `shadows` (`Shadows`): AWS IoT's reserved topics, device shadows and jobs
  (`data_plane.jobs.reserved`): a client's PUBLISH to a shadow or jobs request topic
  (`$aws/things/…/shadow/…`, `…/jobs/…`) is handed to it instead of being routed.

Each is optional: without it the broker keeps that state in memory only (tests, `--auth-file`).
Storage objects are built first, handed to `Broker(...)` in `Ports`, then started with the broker
they serve (restore sessions, load retained and delayed messages).

`Broker.publish` returns `Published`: whom it reached (and how many of those keep it offline), the commits a QoS 1/2 acknowledgement
waits for, and the subscribers whose queues backed up (`slow_down`, each a `Recipient`: a
session, or the cluster's bus when it lags): the caller that read the PUBLISH pauses its client
until they drain (`flow.ReadGate.slow_down`); others ignore it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol


class Outlet(Protocol):
    protocol_version: int
    client_receive_maximum: int
    client_maximum_packet_size: int
    closing: bool
    write_paused: bool
    outbound_bucket: Any  # the tenant's outbound bytes/s bucket, or None
    session: Any
    # Done once CONNACK is written or the connection closes: a later CONNECT of its client id
    # awaits it (`handshake.Handshake.claim`).
    answered: asyncio.Future[None]

    @property
    def batch_full(self) -> bool: ...

    def send(self, data: bytes) -> None: ...

    def pace(self, wait: float) -> None: ...

    def outbound_alias(self, topic: str) -> tuple[int, bool] | None: ...

    def alias_sent(self, topic: str, alias: int) -> None: ...

    def unthrottle_by(self, session: Recipient) -> None: ...


class Client(Outlet, Protocol):
    tenant: str
    device: str
    client_id: str
    auth: Any  # the AuthResult it connected with
    acked: bool  # CONNACK (success) sent: stays true while closing

    def taken_over(self, with_will: bool = True) -> None: ...

    def disconnect(self, reason_code: int, reason: str = "", *, reference: str = "") -> None: ...

    def apply_policy(self, policy: Any) -> None: ...


# -- what a publish returns -------------------------------------------------------------------


class Recipient(Protocol):
    """What `Published.slow_down` names: what a publisher's reading waits for — a session whose
    queue backed up, or the cluster's bus (data_plane.cluster: the forwarder, a destination
    stream's backlog). The read gate holds the publisher with it (`hold`; it lets go through the
    publisher's `unthrottle_by` once drained) and, if it did not drain within the allowance,
    marks it `stalled` (it holds nobody more) and counts a stalled subscriber of its `tenant`
    (None: no tenant's subscriber, the cluster's bus)."""

    stalled: bool
    blocked_publishers: dict[Any, None]  # the publishers it holds, in the order they were held

    @property
    def tenant(self) -> str | None: ...

    def hold(self, publisher: Any) -> None: ...


# A durable copy's commit (a session store's write, the cluster bus's entry): what it resolves to
# differs by store and nobody reads it, only whether it failed; Any, as Future is invariant.
Commit = asyncio.Future[Any]


class Publisher(Protocol):
    """What a `Recipient` holds (`hold`): a publishing connection (or the cluster's stream
    reader), let go through `unthrottle_by` once the recipient has drained."""

    def unthrottle_by(self, session: Recipient) -> None: ...


class Published(NamedTuple):
    """What `Broker.publish` did with a message."""

    reached: int  # sessions it was handed to (5.0: "no matching subscribers" when 0)
    # The commits of its durable copies: a QoS 1/2 acknowledgement awaits them (() when none).
    commits: list[Commit] | tuple[()]
    # Sessions whose queue this message backed up (past half, QoS 1/2): whoever published it
    # should stop reading its client until they drain (back-pressure; see flow.ReadGate).
    slow_down: tuple[Recipient, ...] = ()
    queued: int = 0  # of `reached`, the offline sessions that keep it for later (the journey)


# The common answers, shared rather than built per message (the publish path is hot).
NOTHING = Published(0, ())
REACHED_ONE = Published(1, ())


# -- what the broker is plugged into ------------------------------------------------------------


class WriteRefused(Exception):
    """A commit's failure when the session store refused that one write on its own (a value it
    cannot hold), not because it was away: the publisher hears so (`acks`)."""


class SessionStorage(Protocol):
    """Persistent sessions, mirrored durably. `attach` decides whether a session is persistent:
    it sets `session.persist` (called per QoS 1/2 delivery, returns the commit) and
    `session.durable` (this object, for the acknowledgements' commits) or leaves both None."""

    def attach(self, session: Any) -> None: ...

    async def save(self, session: Any, *, disconnected: bool = False) -> None: ...

    def save_later(self, session: Any, *, disconnected: bool = False) -> None: ...

    def sent(self, session: Any, delivery: Any, packet_id: int) -> None: ...

    def released(self, session: Any, delivery: Any, packet_id: int) -> Commit: ...

    def inbound_qos2(self, session: Any, packet_id: int, held: bool) -> Commit: ...

    def settled(self, session: Any, delivery: Any) -> None: ...

    def will_published(self, session: Any) -> None: ...

    def forget(self, session: Any) -> None: ...

    # A cluster's: the stored session of a client id into the broker (None: there is none).
    async def restore_one(self, tenant: str, client_id: str) -> object: ...

    # Durable shared groups' records (`groups.Holder`: members, end), and their end.
    def group_saved(self, holder: Any) -> None: ...

    def group_deleted(self, holder: Any) -> None: ...


class RetainedStorage(Protocol):
    def retained_changed(self, message: Any) -> None:
        """A retained message was set (or cleared: empty payload); called in order."""


class DelayedStorage(Protocol):
    def schedule(self, message: Any, seconds: int) -> Commit:
        """Keep `message` and publish it in `seconds`; the future resolves once it is kept (the
        publisher's acknowledgement waits for it)."""


class Archive(Protocol):
    # An attribute, not a method: the recorder is swapped at each hand-off to the encoder, and
    # calling it straight saves a frame per message on the hot path.
    record: Any  # Callable[[Message], None]: append what was routed; never blocks


class Journey(Protocol):
    """Where every publish went (`data_plane.observability.journey`): the connection's inbound
    side calls `published` per routed PUBLISH and `refused` per refused one; the rest (drops at
    a subscriber, client events, wills) it hears on the broker's hooks."""

    published: Any  # Callable[[Message, packet_id, Published], None]; swapped per batch

    def refused(self, conn: Any, packet: Any, decision: Any) -> None: ...

    def served(self, conn: Any, message: Any, packet_id: int | None) -> None: ...

    # The cluster's, before a takeover's events (`data_plane.observability.journey_moves`).
    def arriving(self, tenant: str, client_id: str, from_node: str | None) -> None: ...
    def leaving(self, tenant: str, client_id: str, to_node: str) -> None: ...


class Cluster(Protocol):
    """The other broker processes (data_plane.cluster). It routes each publish here and to the
    nodes with a matching route, and delivers theirs here through `Broker.route`."""

    def publish(self, message: Any) -> Published:
        """Route `message` (counted, filtered and retained already) here (`Broker.route`) and
        to every other node with a matching route; the `Published` of both (the bus's commit
        among its commits, the bus itself in `slow_down` when it lags)."""
        ...

    def members(self) -> list[dict[str, Any]]:
        """The live nodes, this one included (for `$SYS/broker/nodes`)."""
        ...

    async def start(self, broker: Any) -> None:
        """Join, before the broker is filled (restored subscriptions are routes too)."""
        ...

    async def ready(self) -> None:
        """The broker is filled (restored): take what other nodes forward from now on."""
        ...

    def hand_held(self, message: Any, topic_filter: str, name: str) -> Commit | None:
        """A message a shared group's holder kept, handed to a node where the group has
        members; the commit of its copy, or None when no node has one (`groups.Holder`)."""
        ...

    def route_changed(self, tenant: str, topic_filter: str, group: str | None, added: bool) -> None:
        """A filter (or a shared group on it) got its first subscriber here, or lost its last:
        the route table follows (the broker's `Router` calls it)."""
        ...

    async def claim(self, tenant: str, client_id: str, clean_start: bool) -> None:
        """Before a CONNECT opens its session: the client id is this node's from now on; any
        other node holding its session lets it go (its connection gets 0x8E) first."""
        ...

    async def admit_connection(self, conn: Any, tenant: str, limit: int) -> int:
        """A CONNECT under the tenant's max_connections counted over every node: 0 (its place is
        held until the connection ends), else the CONNACK reason code."""
        ...

    def rates_for(self, tenant: str, quota: dict[str, int]) -> Any:
        """The tenant's rate buckets (as `Shares.local_rates` on one broker), shared by every
        node."""
        ...

    def figures(self, tenant: str, local: dict[str, Any]) -> dict[str, Any]:
        """The tenant's `$SYS` figures over every node, from this node's own (`local`)."""
        ...

    async def fence(self) -> Fence:
        """For a replay whose filter was just routed here: where each other node's messages
        switch from history to live (`Fence`)."""
        ...

    def take_group(self, tenant: str, topic_filter: str, name: str) -> asyncio.Future[None] | None:
        """A shared group got its first member here: ends once what other nodes' holders kept
        of it was handed over (data_plane.cluster.handover); None when no other node keeps it."""
        ...


class Shadows(Protocol):
    """The device shadow service (data_plane.shadows): requests in, replies through `publish`."""

    def admits(self, auth: Any, topic: str) -> bool:
        """Whether a client with this `AuthResult` may make the request that a PUBLISH to this
        `$`-topic is (every other `$` topic is refused to clients)."""
        ...

    def request(self, auth: Any, message: Any) -> None:
        """Take an admitted request; it is answered later, on its reply topics."""
        ...


class History(Protocol):
    """The tenants' archived messages, for replays (`replay`; data_plane.storage.history)."""

    def horizon(self, tenant: str) -> float | None:
        """The Unix time before which the tenant keeps nothing (its history policies' longest
        keep); None: it keeps no history."""

    async def written(self) -> None:
        """Everything routed so far is in the store, readable."""

    @property
    def writer(self) -> str:
        """This broker's archive writer: what its rows are told apart by (`Fence.ends`)."""

    def read(
        self,
        tenant: str,
        topic_filter: str,
        start_ms: int,
        end_ms: int,
        ends: Mapping[str, int] | None = None,
    ) -> Iterator[list[Any]]:
        """The tenant's messages on topics `topic_filter` matches with archive times in
        [start_ms, end_ms) — or, for a writer `ends` names, before its own end —, in order, in
        batches of `Message`s. Blocking: called from a thread."""


class GroupStorage(Protocol):
    """Where shared groups are kept (data_plane.broker.groups' holders and their sessions;
    `storage.persistence.SessionPersistence`)."""

    def attach(self, session: Any) -> None: ...

    def group_saved(self, holder: Any) -> None: ...

    def group_deleted(self, holder: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class Fence:
    """Where a replay started here hands the other nodes' messages from history to live
    (data_plane.cluster.fences): each answering node took its own cut, one step of its loop
    after it knew the replay's route — the archive rows its writer recorded before `ends[writer]`
    (ms) are replayed, and a live copy it published as its count `c <= counts[node]` is one of
    them (not delivered twice). `missing`: live nodes that did not answer in time (their
    messages switch at this node's cut, as on one node: one in flight may come twice or not)."""

    ends: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Ports:
    """What a broker is plugged into, given at construction; None: that state stays in memory
    (or, for `cluster`, this broker is the only node). The broker keeps each under the same
    name (`broker.persistence`, ...)."""

    persistence: SessionStorage | None = None
    retained_storage: RetainedStorage | None = None
    delayed_storage: DelayedStorage | None = None
    cluster: Cluster | None = None
    archive: Archive | None = None
    journey: Journey | None = None
    shadows: Shadows | None = None
    history: History | None = None


NO_PORTS = Ports()
