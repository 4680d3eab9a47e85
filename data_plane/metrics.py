"""Prometheus metrics of the broker, per tenant, read from the broker's counters on scrape.

Messages are application messages: PUBLISH packets received from the tenant's clients and
deliveries (PUBLISH packets) sent to them; the platform's own traffic — `$SYS`, `$events`, the
portal's live views and the rules' republish identity — is left out, as usage metering does.
Refusals (failed authentication, ACL denials, quota refusals, malformed packets, forced
disconnects) come from `data_plane.observability.refusals`. Writes that a batch shared by tenants
refused alone (`common.stores.isolation`) are counted by batch.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from common.stores import isolation
from data_plane.broker.broker import Broker
from data_plane.observability import refusals


class BrokerCollector:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self):
        connected = GaugeMetricFamily(
            "mqtt_clients_connected",
            "Clients connected (devices; the platform's service identities are not counted)",
            labels=["tenant"],
        )
        received = CounterMetricFamily(
            "mqtt_messages_received",
            "PUBLISH packets received from the tenant's clients",
            labels=["tenant"],
        )
        sent = CounterMetricFamily(
            "mqtt_messages_sent",
            "PUBLISH packets delivered to the tenant's clients",
            labels=["tenant"],
        )
        bytes_in = CounterMetricFamily(
            "mqtt_bytes_received",
            "Payload bytes of the PUBLISH packets received from the tenant's clients",
            labels=["tenant"],
        )
        bytes_out = CounterMetricFamily(
            "mqtt_bytes_sent",
            "Payload bytes of the PUBLISH packets delivered to the tenant's clients",
            labels=["tenant"],
        )
        dropped = CounterMetricFamily(
            "mqtt_messages_dropped",
            "Messages not delivered: PUBLISHes refused, and deliveries dropped (queue full, "
            "expired, QoS 0 while offline)",
            labels=["tenant"],
        )
        held = CounterMetricFamily(
            "mqtt_publishers_held",
            "Times a publisher was paused (its socket not read) while a subscriber it fed was "
            "backed up",
            labels=["tenant"],
        )
        stalled = CounterMetricFamily(
            "mqtt_subscribers_stalled",
            "Subscribers that held publishers a whole allowance (2 s) without draining: they "
            "stop holding anyone, and their queue drops, until drained",
            labels=["tenant"],
        )
        exceeded = CounterMetricFamily(
            "mqtt_quota_exceeded",
            "Quota refusals by quota key (something was not taken)",
            labels=["tenant", "quota"],
        )
        throttled = CounterMetricFamily(
            "mqtt_quota_throttled",
            "Slowdowns by quota key, nothing refused (a publish that waited for a publish rate, "
            "deliveries paced by the outbound rate)",
            labels=["tenant", "quota"],
        )
        for tenant, stats in list(self.broker.stats.items()):
            connected.add_metric([tenant], stats.connected)
            received.add_metric([tenant], stats.messages_received - stats.system_received)
            sent.add_metric([tenant], stats.messages_sent - stats.system_sent)
            bytes_in.add_metric([tenant], stats.bytes_received - stats.system_bytes_received)
            bytes_out.add_metric([tenant], stats.bytes_sent - stats.system_bytes_sent)
            dropped.add_metric([tenant], stats.dropped)
            held.add_metric([tenant], stats.publishers_held)
            stalled.add_metric([tenant], stats.subscribers_stalled)
            for key, count in list(stats.exceeded.items()):
                exceeded.add_metric([tenant, key], count)
            for key, count in list(stats.throttled.items()):
                throttled.add_metric([tenant, key], count)
        sessions = GaugeMetricFamily(
            "mqtt_sessions", "Sessions held by this broker process, connected or not"
        )
        sessions.add_metric([], len(self.broker.sessions))
        doorway = self.broker.doorway
        refused = CounterMetricFamily(
            "mqtt_sockets_refused",
            "New sockets closed unread: their address held too many unauthenticated sockets "
            "(per_source), or the process neared its descriptor limit (descriptors)",
            labels=["reason"],
        )
        for reason, count in doorway.refused.items():
            refused.add_metric([reason], count)
        unauthenticated = GaugeMetricFamily(
            "mqtt_sockets_unauthenticated", "Sockets accepted and not yet through CONNACK"
        )
        unauthenticated.add_metric([], sum(doorway.pending.values()))
        yield from (refused, unauthenticated)
        alone = CounterMetricFamily(
            "mqtt_batch_writes_refused",
            "Writes a batch shared by tenants refused on their own, once the batch failed and "
            "each of its writes was tried alone (the rest took effect), by batch",
            labels=["batch"],
        )
        for batch, count in list(isolation.REFUSED.items()):
            alone.add_metric([batch], count)
        yield alone
        yield from (connected, received, sent, bytes_in, bytes_out, dropped, held, stalled)
        yield from (exceeded, throttled, sessions)
        yield from refusals.log_for(self.broker).metrics()
        for source in list(self.broker.metric_sources):
            yield from source()


def registry_for(broker: Broker) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker))
    return registry
