"""Listeners (TCP, TLS, WebSocket, secure WebSocket, metrics) around one `Broker`."""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass, field
from typing import Any

from data_plane.broker.auth import Authenticator
from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection
from data_plane.broker.handover import WS, Handover, HandoverListener, serve_accepted
from data_plane.broker.landing import Handed, Landing
from data_plane.broker.ports import NO_PORTS, Ports
from data_plane.broker.websocket import WebSocketProtocol
from data_plane.config import BrokerConfig
from data_plane.observability import refusals
from data_plane.tenancy.tls_client_chains import ClientCertificateContext

log = logging.getLogger(__name__)


@dataclass
class Server:
    broker: Broker
    listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    servers: list[asyncio.AbstractServer] = field(default_factory=list)
    tasks: list[asyncio.Task] = field(default_factory=list)
    metrics_server: object | None = None
    handovers: HandoverListener | None = None  # sockets the other workers hand to this one

    async def shutdown(self) -> None:
        """Stop accepting, tell 5.0 clients 0x8B, flush, close."""
        if self.handovers is not None:
            self.handovers.close()
        for server in self.servers:
            server.close()
        for task in self.tasks:
            task.cancel()
        self.broker.shutdown_connections()
        await asyncio.sleep(0.1)  # let the DISCONNECTs reach the sockets
        for conn in list(self.broker.connections):
            if conn.transport is not None:
                conn.transport.abort()  # whatever a slow client has not read is not waited for
        for server in self.servers:
            try:
                await asyncio.wait_for(server.wait_closed(), 2)
            except TimeoutError:
                log.warning("listener did not close within 2 s")
        if self.metrics_server is not None:
            self.metrics_server.shutdown()


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


async def serve(
    config: BrokerConfig,
    authenticator: Authenticator,
    prepare: Any = None,
    ports: Ports = NO_PORTS,
    handover: Handover | None = None,
) -> Server:
    """Start the listeners around a broker plugged into `ports` (storage, cluster); `prepare(broker)`
    (async) runs first, e.g. to restore sessions into it. With `handover` (tenant-affine workers
    of one machine), a plain TCP client is served by its tenant's home worker
    (`data_plane.broker.landing`)."""
    loop = asyncio.get_running_loop()
    broker = Broker(config, authenticator, ports)
    if ports.cluster is not None:  # joins first: the subscriptions `prepare` restores are routes
        await ports.cluster.start(broker)
    refusals.listen(broker)  # log lines and counters of what connections refuse
    if prepare is not None:
        await prepare(broker)
    if ports.cluster is not None:  # filled: what other nodes forward may come in
        await ports.cluster.ready()
    server = Server(broker)
    anchors = getattr(authenticator, "trust_anchors", None)
    tls: ssl.SSLContext | None = None
    if config.tls_cert and anchors is not None:  # client certificates (mTLS), judged at CONNECT
        tls = ClientCertificateContext(
            config.tls_cert, config.tls_key or config.tls_cert, config.tls_domain
        )
        await anchors.attach(tls)  # refuses (raises) any other kind of context
    elif config.tls_cert:
        tls = tls_context(config.tls_cert, config.tls_key)

    async def listen(name: str, port: int | None, factory, ssl_context=None) -> None:
        if port is None:
            return
        listener = await loop.create_server(
            factory,
            config.host,
            port,
            ssl=ssl_context,
            backlog=config.backlog,
            reuse_address=True,
            reuse_port=config.reuse_port or None,  # workers of one machine share the port
        )
        server.servers.append(listener)
        bound = listener.sockets[0].getsockname()
        server.listeners[name] = (bound[0], bound[1])

    if handover is None:
        await listen("mqtt", config.port, lambda: MQTTConnection(broker))
    else:

        def handed(kind: int, data: bytes, at: float) -> asyncio.Protocol:
            if kind == WS:  # the client's bytes from its upgrade request on, replayed
                return WebSocketProtocol(broker, replay=data, accepted_at=at)
            return Handed(broker, data, at)

        server.handovers = HandoverListener(
            handover,
            lambda sock, kind, data, at: serve_accepted(sock, lambda: handed(kind, data, at)),
        )
        await server.handovers.start()  # before the port: handed sockets are welcome at once
        await listen("mqtt", config.port, lambda: Landing(broker, handover))
    await listen("ws", config.ws_port, lambda: WebSocketProtocol(broker, handover=handover))
    if tls is not None:
        await listen(
            "mqtts", config.tls_port, lambda: MQTTConnection(broker, transport_name="tls"), tls
        )
        await listen("wss", config.wss_port, lambda: WebSocketProtocol(broker, "wss"), tls)
    if config.metrics_port is not None:
        from prometheus_client import start_http_server

        from data_plane.metrics import registry_for

        http, _thread = start_http_server(
            config.metrics_port, config.host, registry=registry_for(broker)
        )
        server.metrics_server = http
        server.listeners["metrics"] = (config.host, http.server_port)
    if config.sys_interval > 0:
        server.tasks.append(loop.create_task(_sys_loop(broker, config.sys_interval)))
    return server


async def _sys_loop(broker: Broker, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            broker.publish_sys()
        except Exception:
            log.exception("$SYS publication failed")
