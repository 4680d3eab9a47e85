"""Broker configuration: listeners, limits and timers. Environment and CLI fill it in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int | None = 1883
    ws_port: int | None = 8083
    tls_port: int | None = None
    wss_port: int | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    # Client certificates (mTLS): a client whose server name (SNI) is `{tenant}.{tls_domain}`
    # is that tenant's device or nobody's (as AWS IoT Core's endpoint names an account).
    tls_domain: str | None = None
    metrics_port: int | None = None
    max_packet_size: int = 1_048_576  # advertised in CONNACK; larger inbound packets: 0x95
    receive_maximum: int = 1024  # inbound QoS 2 awaiting PUBREL per client
    topic_alias_maximum: int = 64
    max_queued_messages: int = 1000
    max_inflight: int = 65535
    max_keepalive: int = 0  # 0: the client's value stands
    connect_timeout: float = 10.0  # from accept to CONNACK (WebSocket: the upgrade included)
    preauth_per_source: int = 128  # unauthenticated sockets one address may hold (doorway)
    # Seconds a closing connection keeps reading (and discarding) what its client still sends,
    # so that what we wrote before closing is not lost to a TCP reset (writer.Writer.shut).
    close_linger: float = 2.0
    # Seconds a client may stay over its publish rate, slowed, before its MQTT 5 QoS 1/2
    # publishes that cannot go at once are refused (data_plane.broker.fair_share).
    rate_patience: float = 60.0
    sys_interval: float = 10.0
    write_buffer_high: int = 512 * 1024  # bytes buffered to a client before it counts as slow
    backlog: int = 4096
    # SO_REUSEPORT: several broker processes (`runbroker --workers N`) listen on one port and
    # the kernel spreads new connections over them.
    reuse_port: bool = False
    # Where clients should go when this broker leaves (MQTT 5.0 Server Reference, e.g.
    # "mqtt2.example.com:8883"): shutdown and evacuation send 0x9C with it instead of 0x8B.
    server_reference: str | None = None
