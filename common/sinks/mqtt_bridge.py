"""The MQTT bridge sink: each record published to another broker, its output's JSON text as the
payload, on the action's `topic` template rendered from the output.

A paho-mqtt client per connection (MQTT 5.0, a clean session, client id
`mqtt-platform-{tenant}-{random}` so two writers never take each other's session), run on
paho's own thread. Once its connection is over (lost, refused, or never made) the next send
starts a new client, so reconnecting is paced by the outbox's back-off like every sink's
attempts, and paho never sends again on its own what an ended connection held: the outbox alone
sends again, so each possible duplicate is one the sink's `resent` counts. Each connection goes to an address of the host
vetted like a webhook's (`endpoints.vetted`; TLS still checks the certificate against the
host's name).

A send waits for the connection (`connect_wait`); without one every record fails with the last
reason the connection gave (retry). Then it publishes the records in order with at most
`WINDOW` unacknowledged at once (paho holds the rest back), and a record is ok when:
- QoS 1 (the default): the broker's PUBACK came back with success;
- QoS 2: the PUBCOMP came back;
- QoS 0: it was written to the connection (the broker acknowledges nothing).
A PUBACK with a failure reason (the far end's ACL refused the topic: 0x87 Not authorized) fails
that record permanently, except "quota exceeded" and "server busy", which are retried; no
acknowledgement within `ack_wait`, or the connection lost first, fails it, to be retried by the
outbox: a record the far end took but whose acknowledgement was lost then arrives twice (MQTT's
QoS 1 is at least once), never not at all.

A topic that renders to something no message can be published to (empty, with `+` or `#`, over
65535 bytes) fails that record permanently. Messages of one topic arrive in the order sent.
"""

from __future__ import annotations

import secrets
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from common.rules import render_template
from common.sinks.base import OK, Record, Result, failed, optional, setting
from common.sinks.endpoints import RefusedDestination, vetted

WINDOW = 64  # publishes awaiting their acknowledgement at once
KEEPALIVE = 30
RETRIED_REASONS = (0x97, 0x89, 0x88)  # quota exceeded, server busy, server unavailable
REFUSED = "the broker refused the connection:"
LOST = "the connection to the broker was lost"


def topic_problem(topic: str) -> str | None:
    """Why a message cannot be published to `topic`, or None."""
    if not topic:
        return "the topic template rendered an empty topic"
    if "+" in topic or "#" in topic:
        return f"the topic '{topic[:200]}' has a wildcard (+ or #)"
    if "\x00" in topic or len(topic.encode("utf-8", "surrogatepass")) > 65535:
        return "the topic has a NUL character or is over 65535 bytes"
    return None


class _VettedClient(mqtt.Client):
    """paho's client, connecting only to vetted addresses of its host (its every connection)."""

    last_error: str = "not connected yet"
    connected = False
    ended = False  # its connection is over (lost, refused or never made): a send starts another

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settled = threading.Event()  # connected, or ended

    def _create_socket_connection(self) -> socket.socket:
        try:
            addresses = vetted(self._host, self._port)
        except RefusedDestination as exc:
            self.last_error = str(exc)
            raise
        last: OSError | None = None
        for address in addresses:
            try:
                return socket.create_connection((address, self._port), self._connect_timeout)
            except OSError as exc:
                last = exc
        self.last_error = _socket_words(last)
        raise last or ConnectionError("no connection")

    def _ssl_wrap_socket(self, tcp_sock: socket.socket) -> ssl.SSLSocket:
        try:
            return super()._ssl_wrap_socket(tcp_sock)
        except (OSError, ValueError) as exc:  # ssl.SSLError, CertificateError: words first
            self.last_error = _socket_words(exc)
            raise


def _socket_words(exc: BaseException | None) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "no connection within 5 s"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: the broker's certificate is not trusted ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return "TLS handshake failed"
    return f"network error ({type(exc).__name__})"


class MqttBridgeWriter:
    connect_wait = 5.0  # seconds a send waits for a connection
    ack_wait = 10.0  # seconds a send waits for its acknowledgements

    def __init__(self, action: dict[str, Any], tenant: str) -> None:
        self.host = setting(action, "host")
        try:
            self.port = int(action.get("port") or 0)
        except (TypeError, ValueError):
            self.port = 0
        if not 0 < self.port < 65536:
            raise ValueError("the bridge's 'port' is a number from 1 to 65535")
        self.tls = bool(action.get("tls"))
        self.username = optional(action, "username")
        self.password = optional(action, "password")
        self.topic = setting(action, "topic")
        qos = action.get("qos", 1)
        if qos not in (0, 1, 2):
            raise ValueError("the bridge's 'qos' is 0, 1 or 2")
        self.qos: int = qos
        self.tenant = tenant
        self._client: _VettedClient | None = None
        self._reasons: dict[int, ReasonCode] = {}

    def _start(self) -> _VettedClient:
        if self._client is not None and not self._client.ended:
            return self._client
        if self._client is not None:  # what it still held is the outbox's to send again
            self._client.loop_stop()
            self._client = None
        self._reasons.clear()  # message ids are a client's own
        client = _VettedClient(
            CallbackAPIVersion.VERSION2,
            client_id=f"mqtt-platform-{self.tenant}-{secrets.token_hex(4)}"[:64],
            protocol=mqtt.MQTTv5,
            reconnect_on_failure=False,  # one connection per client (see the module)
        )
        if self.username is not None or self.password is not None:
            client.username_pw_set(self.username or "", self.password)
        if self.tls:
            client.tls_set_context(ssl.create_default_context())
        client.max_inflight_messages_set(WINDOW)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        client.connect_async(self.host, self.port, keepalive=KEEPALIVE, clean_start=True)
        client.loop_start()
        self._client = client
        return client

    def _on_connect(
        self, client: mqtt.Client, _u: Any, _f: Any, reason: ReasonCode, _p: Properties | None
    ) -> None:
        assert isinstance(client, _VettedClient)
        if reason.is_failure:
            client.last_error = f"{REFUSED} {reason.getName()}"
        else:
            client.last_error = LOST
            client.connected = True
        client.settled.set()

    def _on_connect_fail(self, client: mqtt.Client, _u: Any) -> None:
        assert isinstance(client, _VettedClient)
        client.ended = True  # its thread stops: one try per client (reconnect_on_failure off)
        client.settled.set()

    def _on_disconnect(
        self, client: mqtt.Client, _u: Any, _f: Any, reason: ReasonCode, _p: Properties | None
    ) -> None:
        assert isinstance(client, _VettedClient)
        client.connected, client.ended = False, True
        client.settled.set()
        if not client.last_error.startswith(REFUSED):
            said = reason.getName() if reason.is_failure else ""
            told = said and said != "Unspecified error"  # a DISCONNECT with a reason
            client.last_error = f"{LOST} ({said})" if told else LOST

    def _on_publish(
        self, _c: mqtt.Client, _u: Any, mid: int, reason: ReasonCode, _p: Properties | None
    ) -> None:
        self._reasons[mid] = reason

    def _connection(self) -> tuple[_VettedClient, str | None]:
        """The client, and words for why it has no connection after `connect_wait` (or None)."""
        client = self._start()
        client.settled.wait(self.connect_wait)
        if client.connected:
            return client, None
        return client, f"MQTT bridge: {client.last_error}"

    def send(self, records: Sequence[Record]) -> list[Result]:
        client, problem = self._connection()
        if problem is not None:
            return failed(records, problem)
        results: list[Result | None] = [None] * len(records)
        sent: list[tuple[int, mqtt.MQTTMessageInfo]] = []
        for index, record in enumerate(records):
            topic = render_template(self.topic, record.output)
            why = topic_problem(topic)
            if why is not None:
                results[index] = Result(False, f"MQTT bridge: {why}", retry=False)
                continue
            info = client.publish(topic, record.body.encode("utf-8", "surrogatepass"), self.qos)
            sent.append((index, info))
        deadline = time.monotonic() + self.ack_wait
        for index, info in sent:
            results[index] = self._outcome(client, info, deadline)
        return [r if r is not None else OK for r in results]

    def _outcome(
        self, client: _VettedClient, info: mqtt.MQTTMessageInfo, deadline: float
    ) -> Result:
        try:  # until acknowledged, the deadline, or the connection's end (nothing comes then)
            while not info.is_published() and not client.ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                info.wait_for_publish(min(left, 0.1))
        except (ValueError, RuntimeError):
            pass
        reason = self._reasons.pop(info.mid, None)
        if info.rc != mqtt.MQTT_ERR_SUCCESS or not info.is_published():
            words = LOST if not client.connected else None
            words = words or f"no acknowledgement within {self.ack_wait:g} s"
            return Result(False, f"MQTT bridge: {words}")
        if reason is not None and reason.is_failure:
            return Result(
                False,
                f"MQTT bridge: the broker refused the message: {reason.getName()}",
                retry=reason.value in RETRIED_REASONS,
            )
        return OK

    def check(self) -> str | None:
        """The broker takes a connection with the action's credentials (and TLS)."""
        return self._connection()[1]

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.disconnect()
            client.loop_stop()
