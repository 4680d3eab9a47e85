"""Small helpers around paho-mqtt for synchronous tests."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


def _keep_owed_pubrels(client: mqtt.Client) -> None:
    """Work around a paho-mqtt 2.2 bug that breaks QoS 2 exactly-once across a broker restart.

    paho resets its outgoing messages at every reconnect ATTEMPT, before the socket connects:
    a message awaiting PUBCOMP becomes "resend PUBREL" — and at the next reset (the broker was
    still down, the attempt was refused) it becomes "publish", so paho sends the message again as
    a new PUBLISH (DUP 0) with a packet id the broker already released (MQTT-4.3.3: never
    re-send the PUBLISH once PUBREL was sent). A broker must take that as a new message; the
    subscriber then gets it twice. Here an owed PUBREL stays owed however many attempts fail."""
    reset = client._messages_reconnect_reset_out

    def reset_keeping_owed_pubrels() -> None:
        for message in client._out_messages.values():
            if message.state == mqtt.mqtt_ms_resend_pubrel:
                message.state = mqtt.mqtt_ms_wait_for_pubcomp
        reset()

    client._messages_reconnect_reset_out = reset_keeping_owed_pubrels


class Paho:
    """A connected paho client collecting messages; v5 or 3.1.1."""

    def __init__(
        self,
        port: int,
        username: str,
        password: str,
        client_id: str = "",
        *,
        v5: bool = True,
        clean: bool = True,
        expiry: int | None = None,
        transport: str = "tcp",
        will: tuple | None = None,
        connect: bool = True,
        properties: dict | None = None,
        tls: dict | None = None,
        keepalive: int = 60,
    ):
        protocol = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
        kwargs = {} if v5 else {"clean_session": clean}
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=protocol,
            transport=transport,
            **kwargs,
        )
        _keep_owed_pubrels(self.client)
        if transport == "websockets":
            self.client.ws_set_options(path="/mqtt")
        if tls:
            self.client.tls_set(**tls)
        self.client.username_pw_set(username, password)
        self.messages: queue.Queue = queue.Queue()
        self.connack = threading.Event()
        self.reason_code = None
        self.session_present = None
        self.connack_properties = None
        self.disconnect_reason = None
        self.disconnect_reasons: list = []
        self.disconnect_properties = None
        self.disconnected = threading.Event()
        self.subacks: queue.Queue = queue.Queue()
        self.v5 = v5
        self.client.on_connect = self._on_connect
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        self.client.on_disconnect = self._on_disconnect
        self.suback_properties = None  # the last SUBACK's (MQTT 5: its Reason String...)
        self.client.on_subscribe = self._on_subscribe
        if will:
            self.client.will_set(*will)
        self.port, self.clean, self.expiry, self.props, self.keepalive = (
            port,
            clean,
            expiry,
            properties,
            keepalive,
        )
        if connect:
            self.connect()

    def _on_subscribe(self, client, userdata, mid, codes, properties):
        self.suback_properties = properties
        self.subacks.put(codes)

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        self.reason_code = reason_code
        self.session_present = flags.session_present
        self.connack_properties = properties
        self.connack.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):
        self.disconnect_reasons.append(reason_code)  # paho reconnects: a later one may follow
        self.disconnect_reason = reason_code
        self.disconnect_properties = properties
        self.disconnected.set()

    def connect(self, wait: bool = True):
        properties = None
        if self.v5:
            properties = Properties(PacketTypes.CONNECT)
            if self.expiry is not None:
                properties.SessionExpiryInterval = self.expiry
            for key, value in (self.props or {}).items():
                setattr(properties, key, value)
        kwargs = {"clean_start": self.clean, "properties": properties} if self.v5 else {}
        self.client.connect("127.0.0.1", self.port, keepalive=self.keepalive, **kwargs)
        self.client.loop_start()
        if wait:
            assert self.connack.wait(5), "no CONNACK"
        return self

    def subscribe(self, topic: str, qos: int = 0, **options):
        if self.v5 and options:
            opts = mqtt.SubscribeOptions(
                qos=qos, **{k: v for k, v in options.items() if k != "subscription_id"}
            )
            props = None
            if "subscription_id" in options:
                props = Properties(PacketTypes.SUBSCRIBE)
                props.SubscriptionIdentifier = options["subscription_id"]
            self.client.subscribe(topic, options=opts, properties=props)
        else:
            self.client.subscribe(topic, qos)
        return self.subacks.get(timeout=5)

    def publish(
        self,
        topic: str,
        payload: bytes | str,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ):
        info = self.client.publish(topic, payload, qos, retain, properties=properties)
        if qos:
            info.wait_for_publish(5)
        return info

    def expect(self, count: int = 1, timeout: float = 5.0) -> list:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                out.append(self.messages.get(timeout=remaining))
            except queue.Empty:
                break
        return out

    def nothing(self, wait: float = 0.5) -> bool:
        try:
            self.messages.get(timeout=wait)
            return False
        except queue.Empty:
            return True

    def stop_loop(self) -> None:
        stop_loop(self.client)

    def close(self, *, abrupt: bool = False):
        if abrupt:
            self.stop_loop()
            self.client.socket().close()
        else:
            self.client.disconnect()
            self.stop_loop()


def stop_loop(client: mqtt.Client) -> None:
    """`loop_stop()` without paho 2.2's race: after a DISCONNECT its network thread ends on its
    own and clears `_thread` as it goes, which can fall between loop_stop's check and its join
    (AttributeError: 'NoneType' object has no attribute 'join'; CI saw it once; paho issue
    #872). The thread has ended then, which is all loop_stop waits for."""
    try:
        client.loop_stop()
    except AttributeError:
        if client._thread is not None:
            raise


JS = Path(__file__).with_name("js")


def race_for_one_client_id(clients: list[Paho], attempt: int = 0) -> Paho:
    """CONNECT every client (built with `connect=False`, one client id) at the same moment, a
    thread each, and check what a takeover race must end with: each got a CONNACK (success),
    and once the takeovers settle exactly one is connected, the others taken over (0x8E).
    Returns the survivor; closes nobody."""
    threads = [threading.Thread(target=c.connect, kwargs={"wait": False}) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:
        assert client.connack.wait(5), f"attempt {attempt}: no CONNACK"
        assert client.reason_code == 0, f"attempt {attempt}: {client.reason_code}"
    time.sleep(0.3)
    alive = [c for c in clients if not c.disconnected.is_set()]
    assert len(alive) == 1, f"attempt {attempt}: {len(alive)} connected"
    for loser in clients:
        if loser is not alive[0]:
            assert loser.disconnect_reason.value == 0x8E, f"attempt {attempt}"
    return alive[0]


def run_mqtt_js(script: str, *args: str, timeout: float = 30) -> dict:
    """Run a Node script of tests/broker/js with MQTT.js (installed on first use); the JSON
    object it prints last."""
    if not (JS / "node_modules" / "mqtt").exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=JS,
            check=True,
            timeout=300,
            capture_output=True,
        )
    result = subprocess.run(
        ["node", script, *args], cwd=JS, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
