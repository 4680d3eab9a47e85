"""Prometheus metrics of the broker, per tenant, read from the broker's counters on scrape."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from data_plane.broker.broker import Broker


class BrokerCollector:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self):
        connected = GaugeMetricFamily(
            "mqtt_clients_connected", "Connected clients", labels=["tenant"]
        )
        received = CounterMetricFamily(
            "mqtt_messages_received", "Messages published", labels=["tenant"]
        )
        sent = CounterMetricFamily("mqtt_messages_sent", "Messages delivered", labels=["tenant"])
        bytes_in = CounterMetricFamily("mqtt_bytes_received", "Payload bytes in", labels=["tenant"])
        bytes_out = CounterMetricFamily("mqtt_bytes_sent", "Payload bytes out", labels=["tenant"])
        dropped = CounterMetricFamily(
            "mqtt_messages_dropped", "Messages dropped", labels=["tenant"]
        )
        for tenant, stats in list(self.broker.stats.items()):
            connected.add_metric([tenant], stats.connected)
            received.add_metric([tenant], stats.messages_received)
            sent.add_metric([tenant], stats.messages_sent)
            bytes_in.add_metric([tenant], stats.bytes_received)
            bytes_out.add_metric([tenant], stats.bytes_sent)
            dropped.add_metric([tenant], stats.dropped)
        sessions = GaugeMetricFamily("mqtt_sessions", "Sessions in memory")
        sessions.add_metric([], len(self.broker.sessions))
        yield from (connected, received, sent, bytes_in, bytes_out, dropped, sessions)
        for source in list(self.broker.metric_sources):
            yield from source()


def registry_for(broker: Broker) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker))
    return registry
