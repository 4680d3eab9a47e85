"""Where a publish goes in the cluster: here, and once to each other node with a matching route.

This is the hot path of the `Cluster` port (`Cluster.publish` is `Publisher.publish` itself,
no frame in between). The broker has counted, filtered and kept the message as retained; here
the route table (`routes`) names the other nodes with a matching filter, the message is routed
locally (`Broker.route`) and handed to the `Forwarder` (`forward`) once per node — never once
per subscriber — encoded once for every node that serves no shared group.

Shared groups: each matching group (filter, group name) gets the message on one node only, in
turn among the nodes with members (this one included); a node given groups gets them named in
its copy, so it serves those and no others (`codec`).

A retained message goes to every live node, subscribers there or not, so a new subscription
anywhere finds it. A dead node no survivor has replaced yet (`Peers.dying`) is still
forwarded to: its stream keeps the messages for the survivor (`inherit`). The `Published`
answer joins the local one and the bus's: each forwarded copy counts as reached, a QoS > 0
message waits for the bus's commit, and a lagging bus — or a destination whose stream backs up
(`backpressure`) — slows its publisher down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from data_plane.broker.message import Message
from data_plane.broker.ports import Commit, Published
from data_plane.broker.router import HELD
from data_plane.cluster import codec
from data_plane.cluster.bus import Peers
from data_plane.cluster.exactly import Origins
from data_plane.cluster.forward import PAUSE_BYTES, Forwarder
from data_plane.cluster.routes import RemoteNode, RouteTable

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker

TURNS_MAX = 100_000  # shared groups' turns remembered before they are forgotten at once


class Publisher:
    """The `publish` of the Cluster port, and the shared groups' turns it keeps."""

    broker: Broker  # the broker it routes into (`attach`, at the node's start)

    def __init__(
        self,
        node_id: str,
        table: RouteTable,
        peers: Peers,
        forwarder: Forwarder,
        origins: Origins,
    ) -> None:
        self.node_id = node_id
        self.table = table
        self.peers = peers
        self.forwarder = forwarder
        self.origins = origins
        self.turns: dict[tuple[str, tuple[str, str]], int] = {}  # shared group -> next turn

    def attach(self, broker: Broker) -> None:
        self.broker = broker

    def publish(self, message: Message) -> Published:
        """Route `message` here and forward it to every other node with a matching route."""
        broker, peers = self.broker, self.peers
        seq = self.origins.local(message)  # its origin, carried by every copy (exactly.py)
        plain, shared = self.table.match(message.tenant, message.topic)
        assigned: dict[str, list[tuple[str, str]]] = {}
        if not shared:  # the common case: every matching group (if any) is here only
            local = broker.route(message)
            message.cluster_origin = None  # routed (exactly.routed, without the call)
            if not plain and not (message.retain and peers.alive):
                return local
        else:
            mine = self._assign_groups(message, shared, assigned)
            local = broker.route(message, lambda group: (group.topic_filter, group.name) in mine)
            message.cluster_origin = None  # routed (exactly.routed)
        targets: dict[str, tuple[tuple[str, str], ...]] = {}
        alive, dying = peers.alive, peers.dying
        for node in plain:  # a dead node's stream keeps its messages until a survivor takes over
            if node.node_id in alive or node.node_id in dying:  # else not seen yet
                targets[node.node_id] = ()
        for node_id, keys in assigned.items():
            targets[node_id] = tuple(keys)
        wait = message.qos > 0
        commit = None
        flags = codec.DELIVER | (codec.RETAIN if message.retain else 0)
        plain_data = None  # the same bytes for every node that serves no group
        forwarder = self.forwarder
        for node_id, groups in targets.items():
            if groups:
                data = codec.encode(message, flags, groups, seq=seq)
            else:
                if plain_data is None:
                    plain_data = codec.encode(message, flags, seq=seq)
                data = plain_data
            commit = forwarder.add(node_id, data, message.tenant, message.qos, wait)
        if message.retain:  # every node's retained store has it, subscribers there or not
            for node_id in alive:
                if node_id not in targets:
                    data = codec.encode(message, codec.RETAIN)
                    forwarder.add(node_id, data, message.tenant, 0, False)
        if not targets:
            return local
        slow_down = local.slow_down
        if forwarder.buffered > PAUSE_BYTES:  # the bus lags: its publisher waits for it
            slow_down = (*slow_down, forwarder)
        if forwarder.lagging:  # a destination's stream backs up: so does this publisher
            slow_down = (*slow_down, *forwarder.backlogs.slowing(targets))
        reached = local.reached + len(targets)
        if commit is None:
            return Published(reached, local.commits, slow_down, local.queued)
        return Published(reached, [*local.commits, commit], slow_down, local.queued)

    def hand_held(self, message: Message, topic_filter: str, name: str) -> Commit | None:
        """A message this node's holder of a group kept, handed to a live node where the group
        has members (that node serves that group only: `codec.GROUPS`); the commit of its copy
        on the bus, None when no node has a member or the bus lags (the holder keeps it)."""
        if self.forwarder.buffered > PAUSE_BYTES:
            return None
        _plain, shared = self.table.match(message.tenant, message.topic)
        alive, key = self.peers.alive, (topic_filter, name)
        nodes = sorted(
            node.node_id
            for k, found in shared
            if k == key
            for node in found
            if node.node_id in alive
        )
        if not nodes:
            return None
        turn = self.turns.get((message.tenant, key), 0)
        self.turns[(message.tenant, key)] = turn + 1
        return self.hand_to(nodes[turn % len(nodes)], message, topic_filter, name)

    def hand_to(self, node_id: str, message: Message, topic_filter: str, name: str) -> Commit:
        """A held message of the group (filter, name) to `node_id`; the commit of its copy."""
        data = codec.encode(message, codec.GROUPS, ((topic_filter, name),))
        return self.forwarder.add(node_id, data, message.tenant, 1, True)  # type: ignore[return-value]  # waited for: a commit

    def _assign_groups(
        self,
        message: Message,
        shared: list[tuple[tuple[str, str], list[RemoteNode]]],
        assigned: dict[str, list[tuple[str, str]]],
    ) -> set[tuple[str, str]]:
        """One node per matching shared group (filter, group) for this message, in turn among
        the nodes with members (this one included) — with none, the first of the nodes whose
        holder keeps it (`router.HELD` routes); fills `assigned` (node -> its groups) and
        returns the groups this node serves."""
        me, alive = self.node_id, self.peers.alive
        local = self.broker.router.match(message.tenant, message.topic)[1]
        here = {(group.topic_filter, group.name) for group in local if group.members}
        held_here = {(g.topic_filter, g.name) for g in local if not g.members and g.holder}
        remote: dict[tuple[str, str], list[str]] = {}
        held: dict[tuple[str, str], list[str]] = {}  # groups only holders keep, by node
        for (topic_filter, name), nodes in shared:
            live = sorted(node.node_id for node in nodes if node.node_id in alive)
            if name.startswith(HELD):
                held[(topic_filter, name[len(HELD) :])] = live
            else:
                remote[(topic_filter, name)] = live
        mine: set[tuple[str, str]] = set()
        if len(self.turns) > TURNS_MAX:  # groups come and go: forget old turns now and then
            self.turns.clear()
        for key in here | remote.keys() | held_here | held.keys():
            candidates = ([me] if key in here else []) + remote.get(key, [])
            if not candidates:  # no member anywhere: one holder keeps it (one writer, in order)
                keepers = sorted(([me] if key in held_here else []) + held.get(key, []))
                if keepers and keepers[0] == me:
                    mine.add(key)
                elif keepers:
                    assigned.setdefault(keepers[0], []).append(key)
                continue
            turn_key = (message.tenant, key)
            turn = self.turns.get(turn_key, 0)
            self.turns[turn_key] = turn + 1
            chosen = candidates[turn % len(candidates)]
            if chosen == me:
                mine.add(key)
            else:
                assigned.setdefault(chosen, []).append(key)
        return mine
