"""Where did my message go? Each outcome produced on purpose against the broker as operators run
it (runbroker on Postgres, paho clients) and found through the REST API with its reason; a
client's life in order; another tenant sees none of it, by wildcard or by client id."""

import socket
import time

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from common.mqtt.codec import encode
from common.mqtt.packets import MQTT_5_0, Connect
from tenants.accounts import services as account_services
from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.api.conftest import client_for
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import running_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


def journey(api, **params):
    response = api.get("/api/v1/journey", params)
    assert response.status_code == 200, response.content
    return response.json()["results"]


def eventually(fetch, ready, within=8.0):
    deadline = time.monotonic() + within
    while True:
        rows = fetch()
        if ready(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def expiring(seconds: int) -> Properties:
    props = Properties(PacketTypes.PUBLISH)
    props.MessageExpiryInterval = seconds
    return props


def test_every_outcome_is_found_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant, _, token = account_services.signup(
        tenant="acme", email="o@acme.io", password="pass-w0rd-a"
    )
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    tenant_services.tenant_set_quota(
        tenant, {"max_message_size": 200, "max_retained_messages": 1, "max_queued_messages": 2}
    )
    acl_services.acl_add(tenant=tenant, action="publish", permission="deny", topic="secret/#")
    evil, _, evil_token = account_services.signup(
        tenant="evil", email="o@evil.io", password="pass-w0rd-e"
    )
    _, evil_secret = device_services.device_create(tenant=evil, name="d", client_id_policy="any")
    api, attacker = client_for(token), client_for(evil_token)

    with running_pg_broker("--no-archive", "--journey-interval", "0.2") as port:
        watcher = Paho(port, "acme/d", secret, "watcher")
        watcher.subscribe("live/#", 1)
        sleeper = Paho(port, "acme/d", secret, "sleeper", clean=False, expiry=300)
        sleeper.subscribe("q/#", 1)
        sleeper.close()
        intruder = Paho(port, "acme/d", "wrong", "intruder")
        assert intruder.reason_code == 0x86
        intruder.stop_loop()  # no retries
        pub = Paho(port, "acme/d", secret, "pub")
        pub.publish("live/1", b'{"t": 21.5}', 1)
        pub.publish("nobody/1", b"{}", 1)
        pub.publish("secret/x", b"{}", 1)
        pub.publish("r/1", b"a", 1, retain=True)
        pub.publish("r/2", b"b", 1, retain=True)  # over max_retained_messages
        pub.publish("q/e", b"{}", 1, properties=expiring(1))
        time.sleep(1.2)
        for n in range(3):  # the queue holds 2: q/e and q/0; q/1 and q/2 find it full
            pub.publish(f"q/{n}", b"{}", 1)
        sleeper = Paho(port, "acme/d", secret, "sleeper", clean=False, expiry=300)
        assert [m.topic for m in sleeper.expect(1, 3)] == ["q/0"]  # q/e expired meanwhile
        pub.publish("live/big", b"x" * 500, 1)  # over max_message_size: the connection ends
        assert pub.disconnected.wait(3)
        pub.stop_loop()  # no reconnection
        stranger = Paho(port, "evil/d", evil_secret, "pub")  # the same client id, elsewhere
        stranger.publish("live/1", b"{}", 1)

        rows = eventually(lambda: journey(api), lambda rows: len(rows) >= 11)
        by_topic = {}
        for row in rows:
            by_topic.setdefault((row["topic"], row["outcome"]), row)
        assert by_topic[("live/1", "delivered")]["sessions"] == 1
        assert "delivered to 1 session" in by_topic[("live/1", "delivered")]["reason"]
        assert by_topic[("live/1", "delivered")]["packet_id"] is not None
        assert by_topic[("nobody/1", "no_subscribers")]["sessions"] == 0
        assert by_topic[("secret/x", "acl_denied")]["reason_code"] == 0x87
        assert by_topic[("secret/x", "acl_denied")]["reason_code_text"] == "0x87 Not authorized"
        retained = by_topic[("r/2", "quota_exceeded")]
        assert retained["quota"] == "retained" and retained["reason_code"] == 0x97
        assert "retained message limit" in retained["reason"]
        assert by_topic[("q/e", "delivered")]["queued"] == 1
        assert by_topic[("q/e", "expired")]["subscriber"] == "sleeper"
        full = [r for r in rows if r["outcome"] == "queue_full"]
        assert sorted(r["topic"] for r in full) == ["q/1", "q/2"]
        assert {r["subscriber"] for r in full} == {"sleeper"}
        # Issue 41: their own rows tell that fate (not "kept in its queue"), linked by id.
        for drop in full:
            own = by_topic[(drop["topic"], "delivered")]
            assert own["reason"].startswith("delivered to 0 of 1 session: dropped by 1 ")
            assert "queue_full" in own["reason"] and (own["queued"], own["lost"]) == (0, 1)
            assert drop["message_id"] == own["message_id"] is not None
            assert drop["packet_id"] == own["packet_id"] is not None
        assert by_topic[("q/0", "delivered")]["message_id"] is None
        assert "kept in its queue" in by_topic[("q/0", "delivered")]["reason"]
        big = by_topic[("live/big", "too_large")]
        assert big["reason_code"] == 0x95 and "max_message_size of 200 bytes" in big["reason"]

        # Filters: by topic (wildcards), outcome and client; newest first.
        assert {r["topic"] for r in journey(api, topic="q/+")} == {"q/e", "q/0", "q/1", "q/2"}
        assert {r["topic"] for r in journey(api, outcome="queue_full,expired")} == {
            "q/1",
            "q/2",
            "q/e",
        }
        assert {r["client_id"] for r in journey(api, client="pub")} == {"pub"}
        times = [r["time"] for r in rows]
        assert times == sorted(times, reverse=True)

        # The attacker's view: its own single row, nothing of acme's, whatever it asks.
        theirs = eventually(lambda: journey(attacker, topic="#"), lambda rows: rows)
        assert [(r["topic"], r["outcome"]) for r in theirs] == [("live/1", "no_subscribers")]
        assert journey(attacker, client="watcher") == []
        assert attacker.get("/api/v1/clients/sleeper/events").json()["results"] == []

        # A client's life, in order: each event's version above the last.
        events = eventually(
            lambda: api.get("/api/v1/clients/sleeper/events").json()["results"],
            lambda rows: len(rows) >= 4,
        )
        oldest_first = list(reversed(events))
        assert [e["event"] for e in oldest_first][:4] == [
            "connected",
            "subscribed",
            "disconnected",
            "connected",
        ]
        assert oldest_first[1]["detail"] == "q/# (QoS 1)"
        assert oldest_first[2]["initiator"] == "client"
        versions = [e["version"] for e in oldest_first]
        assert versions == sorted(set(versions))
        failed = api.get("/api/v1/clients/intruder/events").json()["results"]
        assert [(e["event"], e["reason_code"]) for e in failed] == [("connect_failed", 0x86)]
        pub_events = api.get("/api/v1/clients/pub/events").json()["results"]
        assert pub_events[0]["event"] == "disconnected"
        assert pub_events[0]["initiator"] == "server" and pub_events[0]["reason_code"] == 0x95

        # A bad request names its parameter.
        bad = api.get("/api/v1/journey", {"topic": "a/#/b"})
        assert bad.status_code == 400 and "topic" in bad.json()["error"]["fields"]
        assert api.get("/api/v1/journey", {"outcome": "lost"}).status_code == 400
        assert api.get("/api/v1/journey", {"from": "yesterday"}).status_code == 400
        for client in (watcher, sleeper, stranger):
            client.close()


def test_client_events_say_why_in_words(tmp_path, monkeypatch):
    # Issue 41: a `connected` event read "0x00 Normal disconnection", and a socket closed without
    # DISCONNECT read `tcp_closed`. Each event's reason is words, right for its event.
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant, _, token = account_services.signup(
        tenant="acme", email="o@acme.io", password="pass-w0rd-a"
    )
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    api = client_for(token)

    def events(client_id: str, count: int) -> list[dict]:
        return eventually(
            lambda: api.get(f"/api/v1/clients/{client_id}/events").json()["results"],
            lambda rows: len(rows) >= count,
        )

    with running_pg_broker("--no-archive", "--journey-interval", "0.2") as port:
        Paho(port, "acme/d", secret, "polite").close()  # DISCONNECT, then the socket closes
        Paho(port, "acme/d", secret, "dropper", v5=False).close(abrupt=True)  # no DISCONNECT
        # Keep alive 1 s, then silence (no PINGREQ): the broker gives up after 1.5 s.
        sleepy = socket.create_connection(("127.0.0.1", port), timeout=5)
        connect = Connect("sleepy", MQTT_5_0, keep_alive=1, username="acme/d")
        connect.password = secret.encode()
        sleepy.sendall(encode(connect, MQTT_5_0))
        sleepy.settimeout(5)
        while sleepy.recv(1024):  # CONNACK, later DISCONNECT 0x8D, then the end
            pass
        sleepy.close()

        connected, polite = reversed(events("polite", 2))
        assert (connected["event"], connected["reason_code"]) == ("connected", 0)
        assert connected["reason_code_text"] == "0x00 Success"
        assert connected["reason"] == "connected"
        assert polite["event"] == "disconnected" and polite["initiator"] == "client"
        assert polite["reason_code_text"] == "0x00 Normal disconnection"
        assert polite["reason"].startswith("Normal disconnection: the device sent DISCONNECT")

        dropped = events("dropper", 2)[0]
        assert dropped["event"] == "disconnected" and dropped["reason_code"] is None
        assert "closed the connection without sending DISCONNECT" in dropped["reason"]

        timed_out = events("sleepy", 2)[0]
        assert timed_out["reason_code_text"] == "0x8D Keep-alive timeout"
        assert timed_out["reason"].startswith("Keep-alive timeout: the broker heard nothing")
        for client_id in ("polite", "dropper", "sleepy"):
            for event in events(client_id, 2):
                assert "_" not in event["reason"], event  # no token (tcp_closed…) shown as is
