"""Postgres stops under a running broker and comes back: persistent writes fail clearly,
transient traffic keeps flowing, known devices still connect, and the broker recovers alone."""

import socket
import time

import pytest
from django.db import connection

from common.mqtt.codec import Reader, encode
from common.mqtt.packets import MQTT_5_0, Connect, PubAck, Publish
from common.runtime import embedded
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


class RawV5:
    """A bare 5.0 client on our codec: paho hides the reason codes of negative PUBACKs."""

    def __init__(self, port: int, username: str, password: str, client_id: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.reader = Reader(server_side=False, protocol_version=MQTT_5_0)
        connect = Connect(client_id, MQTT_5_0, username=username, password=password.encode())
        self.sock.sendall(encode(connect, MQTT_5_0))
        assert self.next().reason_code == 0
        self.packet_id = 0

    def next(self):
        while True:
            if getattr(self, "_pending", None):
                return self._pending.pop(0)
            data = self.sock.recv(65536)
            assert data, "connection closed"
            self._pending = self.reader.feed(data)

    def publish_qos1(self, topic: str, payload: bytes) -> PubAck:
        self.packet_id += 1
        self.sock.sendall(encode(Publish(topic, payload, 1, packet_id=self.packet_id), MQTT_5_0))
        ack = self.next()
        assert isinstance(ack, PubAck) and ack.packet_id == self.packet_id
        return ack


@pytest.mark.serial  # stops the Postgres every other test uses
def test_postgres_outage_and_recovery():
    tenant = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    process, port = start_pg_broker("--no-archive")
    try:
        durable = Paho(port, "acme/d", secret, "durable", clean=False, expiry=3600)
        durable.subscribe("keep/#", 1)
        durable.close()
        live = Paho(port, "acme/d", secret, "live")
        live.subscribe("live/#", 1)
        publisher = RawV5(port, "acme/d", secret, "pub5")
        old = Paho(port, "acme/d", secret, "pub311", v5=False)
        assert publisher.publish_qos1("keep/before", b"0").reason_code == 0

        embedded.stop_postgres()
        try:
            refused = publisher.publish_qos1("keep/outage", b"1")
            assert refused.reason_code == 0x80
            assert "storage unavailable" in refused.properties["reason_string"]
            # Transient traffic does not need the database.
            assert publisher.publish_qos1("live/outage", b"2").reason_code == 0
            assert [m.payload for m in live.expect(1, 5)] == [b"2"]
            # 3.1.1 has no negative PUBACK: no acknowledgement, the connection closes.
            old.client.publish("keep/outage", b"3", 1)
            assert old.disconnected.wait(10)
            # A device the broker knows still connects; an unknown one is told to come back.
            assert Paho(port, "acme/d", secret, "during").reason_code == 0
            ghost = Paho(port, "acme/ghost", "x", "ghost", connect=False)
            ghost.connect(wait=False)
            assert ghost.connack.wait(10) and ghost.reason_code == 0x88
        finally:
            embedded.postgres_url()  # start it again
            connection.close()

        deadline = time.monotonic() + 20
        while True:
            code = publisher.publish_qos1("keep/after", b"4").reason_code
            if code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert code == 0, "the broker did not recover once Postgres was back"

        back = Paho(port, "acme/d", secret, "durable", clean=False, expiry=3600)
        assert back.session_present
        payloads = [m.payload for m in back.expect(10, 3)]
        assert b"0" in payloads and b"4" in payloads
        back.close()
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0
