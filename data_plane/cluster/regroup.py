"""A dead node's share of shared-group messages, given to a surviving member of each group.

A publish assigns each matching shared group to one node with members
(`Publisher._assign_groups`) and sends it the message naming the groups it serves. When that
node dies before it delivered (its stream still holds the entry: read but not acknowledged, or
not read — see `inherit`), the survivor draining the stream hands each named group's copy on
(`reassign`): to a member here (this node's own, or one of the dead node's persistent members it
just adopted) if there is one — or this node's holder of the group, which keeps it —, else to a
live node with members, marked `codec.GROUPS` so that node serves that group only (its plain
subscribers had their own copy from the publisher), else to the first live node whose holder
keeps the group (`router.HELD` routes). With none of these the message is counted as dropped
(`group_gone`).

Once per group: entries the dead node had committed (its persistent members' queues hold them)
are skipped by the drain's stream mark, and every other entry is handed on once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from data_plane.broker.groups import member_copy
from data_plane.broker.message import Message
from data_plane.broker.ports import Commit
from data_plane.broker.router import HELD
from data_plane.cluster import codec
from data_plane.cluster.bus import Drop, Peers
from data_plane.cluster.forward import Forwarder
from data_plane.cluster.routes import RouteTable

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker


def serve_here(
    broker: Broker, message: Message, groups: Any, commits: list[Commit]
) -> set[tuple[str, str]]:
    """Give `message` to one member here of each of `groups` ((filter, group) pairs); returns
    the groups that have no member here."""
    _subscribers, here = broker.router.match(message.tenant, message.topic)
    local = {(group.topic_filter, group.name): group for group in here}
    missing = set()
    for key in groups:
        group = local.get(key)
        member = group.pick(kept=True) if group is not None else None  # (kept: no wait)
        if member is None:
            if group is not None and group.holder is not None:  # kept here for a member
                commit = group.holder.hold(message)
                if commit is not None:
                    commits.append(commit)
            else:
                missing.add(key)
            continue
        commit = member.session.deliver(member_copy(message, group, member))  # type: ignore[arg-type]  # a member: it has a group
        if commit is not None:
            commits.append(commit)
    return missing


def reassign(
    message: Message,
    groups: Any,
    seq: int,
    commits: list[Commit],
    *,
    broker: Broker,
    table: RouteTable,
    peers: Peers,
    forwarder: Forwarder,
    drop: Drop,
) -> int:
    """The groups the dead node was to serve for `message`, served by a surviving member;
    returns how many groups were served."""
    missing = serve_here(broker, message, groups, commits)
    served = len(groups) - len(missing)
    if missing:
        _plain, shared = table.match(message.tenant, message.topic)
        remote = dict(shared)
        for key in missing:
            nodes = sorted(n.node_id for n in remote.get(key, ()) if n.node_id in peers.alive)
            if nodes:
                node = nodes[seq % len(nodes)]  # (spread, like the publisher's turns)
            else:  # no member anywhere: the first node whose holder keeps it (router.HELD)
                kept = remote.get((key[0], HELD + key[1]), ())
                keepers = sorted(n.node_id for n in kept if n.node_id in peers.alive)
                if not keepers:
                    drop("group_gone", 1)
                    continue
                node = keepers[0]
            data = codec.encode(message, codec.GROUPS, (key,))
            commit = forwarder.add(node, data, message.tenant, message.qos, message.qos > 0)
            if commit is not None:
                commits.append(commit)
            served += 1
    return served
