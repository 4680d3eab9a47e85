"""The node's `/metrics`: what an operator reads to see the cluster from one of its nodes.

One collector (`collect`, behind `Cluster.metrics` in the broker's `metric_sources`) reads
the counters the other rooms keep — membership, the route table, the forwarder, the stream
consumer, session takeovers, wills, relays — at scrape time, so the hot paths only bump
integers.
`$SYS/broker/nodes` reads `Cluster.members()` instead (data_plane.broker.sys_topics); the
tenants' `$SYS` figures over the nodes are `limits`' own (`ClusterLimits.figures`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from data_plane.cluster.departed import Departed
from data_plane.cluster.forward import Forwarder
from data_plane.cluster.membership import Membership
from data_plane.cluster.receive import Receiver
from data_plane.cluster.relay import Relays
from data_plane.cluster.routes import RouteTable
from data_plane.cluster.sessions import SessionClaims
from data_plane.cluster.their_routes import TheirRoutes
from data_plane.cluster.wills import WillRegistry


class Metered(Protocol):
    """What the node's /metrics read of it (`Cluster`): its rooms' counters."""

    info: dict[str, Any]

    @property
    def alive(self) -> dict[str, dict[str, object]]: ...

    dropped: dict[str, int]
    table: RouteTable
    forwarder: Forwarder
    membership: Membership
    their_routes: TheirRoutes
    receiver: Receiver
    sessions: SessionClaims
    relays: Relays
    departed: Departed
    wills: WillRegistry

    def members(self) -> list[dict[str, Any]]: ...


DROP_REASONS = "bus_unavailable, backlog, store_unavailable, stream_gap, session_gone"


def collect(cluster: Metered) -> Iterator[Metric]:
    """The cluster's metric families, as this node sees them now."""
    nodes = GaugeMetricFamily(
        "mqtt_cluster_nodes", "Live nodes of the broker cluster, this one included"
    )
    nodes.add_metric([], 1 + len(cluster.alive))
    member = GaugeMetricFamily(
        "mqtt_cluster_node",
        "One per live node of the cluster (1: this process)",
        labels=["node", "host", "pid"],
    )
    for info in cluster.members():
        member.add_metric(
            [info["node"], str(info.get("host", "")), str(info.get("pid", ""))],
            1 if info is cluster.info else 0,
        )
    bus = GaugeMetricFamily("mqtt_cluster_bus_up", "1 while the cluster bus (Redis) answers")
    bus.add_metric([], 1 if cluster.membership.bus_up else 0)
    routes = GaugeMetricFamily(
        "mqtt_cluster_remote_routes", "Routes of other nodes in this node's route table"
    )
    routes.add_metric([], len(cluster.table))
    forwarder = cluster.forwarder
    forwarded = CounterMetricFamily(
        "mqtt_cluster_forwarded_messages", "Messages forwarded to another node (per node)"
    )
    forwarded.add_metric([], forwarder.forwarded)
    batches = CounterMetricFamily(
        "mqtt_cluster_forward_batches", "Stream entries written (each a batch of messages)"
    )
    batches.add_metric([], forwarder.batches)
    received = CounterMetricFamily(
        "mqtt_cluster_received_messages", "Messages other nodes forwarded to this one"
    )
    received.add_metric([], cluster.receiver.received)
    dropped = CounterMetricFamily(
        "mqtt_cluster_forward_dropped",
        f"Messages not forwarded or not kept, by reason ({DROP_REASONS})",
        labels=["reason"],
    )
    for reason in ("bus_unavailable", "backlog"):
        dropped.add_metric([reason], forwarder.dropped[reason])
    for reason, count in cluster.dropped.items():  # e.g. store_unavailable, stream_trimmed
        dropped.add_metric([reason], count)
    refused = CounterMetricFamily(
        "mqtt_cluster_refused_connections",
        "Connections refused (0x88) while this node was cut off from the cluster bus",
    )
    refused.add_metric([], cluster.membership.refused)
    sessions = cluster.sessions
    takeovers = CounterMetricFamily(
        "mqtt_cluster_session_takeovers",
        "Sessions taken over between nodes: `taken` from another node, `released` to one",
        labels=["direction"],
    )
    takeovers.add_metric(["taken"], sessions.takeovers)
    takeovers.add_metric(["released"], sessions.released)
    takeovers.add_metric(["restored"], sessions.brought)
    takeovers.add_metric(["adopted"], sessions.adopted)
    wills = CounterMetricFamily(
        "mqtt_cluster_dead_node_wills",
        "Wills of dead nodes' clients (not kept in Postgres) published by this node",
    )
    wills.add_metric([], cluster.wills.published)
    relayed = CounterMetricFamily(
        "mqtt_cluster_relayed_messages",
        "Messages relays here sent on to the node a session moved to (cluster/relay.py)",
    )
    relayed.add_metric([], cluster.relays.relayed + cluster.departed.relayed)
    hold = cluster.receiver.hold
    held = CounterMetricFamily(
        "mqtt_cluster_stream_holds",
        "Times this node stopped reading its forward stream for sessions it backed up "
        "(`expired`: they held it for the whole allowance and stalled)",
        labels=["end"],
    )
    held.add_metric(["released"], hold.holds - hold.expired)
    held.add_metric(["expired"], hold.expired)
    held_seconds = CounterMetricFamily(
        "mqtt_cluster_stream_held_seconds",
        "Seconds this node's forward stream reader spent held by sessions it backed up",
    )
    held_seconds.add_metric([], hold.seconds)
    backlogs = forwarder.backlogs
    paused = CounterMetricFamily(
        "mqtt_cluster_destination_backlogs",
        "Times another node's forward stream backed up past its mark: its publishers here held",
    )
    paused.add_metric([], backlogs.paused)
    lagging = GaugeMetricFamily(
        "mqtt_cluster_destinations_lagging", "Other nodes whose forward stream is backed up now"
    )
    lagging.add_metric([], len(backlogs.lagging))
    resubscribed = CounterMetricFamily(
        "mqtt_cluster_route_channel_resubscribed",
        "Times the route channel was lost (Redis restarted, output-buffer limit) and taken up",
    )
    resubscribed.add_metric([], cluster.their_routes.resubscribed)
    yield from (nodes, member, bus, routes, forwarded, batches, received, dropped, refused)
    yield from (takeovers, resubscribed, wills, relayed, held, held_seconds, paused, lagging)
