"""Sessions, QoS, retained, wills, takeover and MQTT 5.0 features, driven by paho-mqtt."""

import time

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.broker.clients import Paho


@pytest.mark.parametrize("v5", [False, True])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_publish_subscribe_each_qos(broker, v5, qos):
    sub = Paho(broker.port, "acme/d1", "pw1", f"sub-{v5}-{qos}", v5=v5)
    sub.subscribe(f"qos/{v5}/{qos}", qos)
    pub = Paho(broker.port, "acme/d2", "pw2", f"pub-{v5}-{qos}", v5=v5)
    for i in range(20):
        pub.publish(f"qos/{v5}/{qos}", f"m{i}", qos)
    got = sub.expect(20)
    assert [m.payload.decode() for m in got] == [f"m{i}" for i in range(20)]  # ordered
    assert {m.qos for m in got} == {qos}
    sub.close(), pub.close()


def test_bad_credentials_and_client_ids_get_their_codes(broker):
    cases = [
        (dict(username="acme/d1", password="wrong"), True, 134),
        (dict(username="acme/nobody", password="pw1"), True, 134),
        (dict(username="acme/d1", password="pw1"), True, 0),
        (dict(username="other/d1", password="pw1"), True, 134),  # acme's secret, other tenant
        (dict(username="acme/exact", password="pw-exact", client_id="not-exact"), True, 133),
        (dict(username="acme/gw", password="pw-gw", client_id="gw-12"), True, 0),
        (dict(username="acme/gw", password="pw-gw", client_id="gateway"), True, 133),
        (dict(username="acme/d1", password="wrong"), False, 134),  # paho maps 3.1.1 rc 4
        (dict(username="acme/exact", password="pw-exact", client_id="nope"), False, 133),
    ]
    for kwargs, v5, expected in cases:
        client = Paho(
            broker.port, kwargs["username"], kwargs["password"], kwargs.get("client_id", ""), v5=v5
        )
        assert client.reason_code.value == expected, (kwargs, v5, client.reason_code)
        client.close()


def test_exact_policy_assigns_device_name(broker):
    client = Paho(broker.port, "acme/exact", "pw-exact", "", v5=True)
    assert client.reason_code == 0
    assigned = getattr(client.connack_properties, "AssignedClientIdentifier", None)
    assert assigned in (None, "exact")  # the device name is the identity
    client.close()


def test_retained_set_replace_clear(broker):
    pub = Paho(broker.port, "acme/d1", "pw1", "ret-pub")
    pub.publish("ret/t", "one", 1, retain=True)
    pub.publish("ret/t", "two", 1, retain=True)
    first = Paho(broker.port, "acme/d2", "pw2", "ret-sub1")
    first.subscribe("ret/#", 1)
    (message,) = first.expect(1)
    assert message.payload == b"two" and message.retain
    pub.publish("ret/t", "", 1, retain=True)
    time.sleep(0.2)
    second = Paho(broker.port, "acme/d3", "pw3", "ret-sub2")
    second.subscribe("ret/#", 1)
    assert second.nothing()
    for c in (pub, first, second):
        c.close()


def test_live_delivery_clears_retain_flag_unless_retain_as_published(broker):
    plain = Paho(broker.port, "acme/d1", "pw1", "rap-plain")
    plain.subscribe("rap/x", 1)
    rap = Paho(broker.port, "acme/d2", "pw2", "rap-rap")
    rap.subscribe("rap/x", 1, retainAsPublished=True)
    pub = Paho(broker.port, "acme/d3", "pw3", "rap-pub")
    pub.publish("rap/x", "v", 1, retain=True)
    assert plain.expect(1)[0].retain is False
    assert rap.expect(1)[0].retain is True
    pub.publish("rap/x", "", 1, retain=True)
    for c in (plain, rap, pub):
        c.close()


def test_will_on_abnormal_loss_not_on_normal_disconnect(broker):
    watcher = Paho(broker.port, "acme/d1", "pw1", "will-watch")
    watcher.subscribe("wills/#", 1)
    normal = Paho(
        broker.port, "acme/d2", "pw2", "will-normal", will=("wills/normal", "gone", 1, False)
    )
    normal.close()
    abrupt = Paho(
        broker.port, "acme/d3", "pw3", "will-abrupt", will=("wills/abrupt", "lost", 1, False)
    )
    abrupt.close(abrupt=True)
    got = watcher.expect(1, timeout=5)
    assert [(m.topic, m.payload) for m in got] == [("wills/abrupt", b"lost")]
    assert watcher.nothing(0.5)
    watcher.close()


def test_will_delay_cancelled_by_reconnect(broker):
    watcher = Paho(broker.port, "acme/d1", "pw1", "wd-watch")
    watcher.subscribe("wd/#", 1)
    will_props = Properties(PacketTypes.WILLMESSAGE)
    will_props.WillDelayInterval = 2
    client = Paho(
        broker.port,
        "acme/d2",
        "pw2",
        "wd-client",
        clean=False,
        expiry=60,
        will=("wd/t", "late", 1, False, will_props),
    )
    client.close(abrupt=True)
    back = Paho(broker.port, "acme/d2", "pw2", "wd-client", clean=False, expiry=60)
    assert back.session_present
    assert watcher.nothing(3)  # reconnected within the delay: no will
    delayed = Paho(
        broker.port,
        "acme/d3",
        "pw3",
        "wd-other",
        will=("wd/u", "after-delay", 1, False, will_props),
        expiry=10,
    )
    delayed.close(abrupt=True)
    assert watcher.nothing(1.0)
    got = watcher.expect(1, timeout=4)
    assert [m.payload for m in got] == [b"after-delay"]
    back.close()
    watcher.close()


def test_takeover_disconnects_the_older_connection(broker):
    first = Paho(broker.port, "acme/d1", "pw1", "dup-id")
    second = Paho(broker.port, "acme/d2", "pw2", "dup-id")
    assert first.disconnected.wait(5)
    assert first.disconnect_reason.value == 0x8E
    assert second.reason_code == 0
    first.stop_loop()
    second.close()


def test_persistent_session_gets_queued_messages(broker):
    sub = Paho(broker.port, "acme/d1", "pw1", "persist", clean=False, expiry=300)
    sub.subscribe("persist/#", 1)
    sub.close()
    pub = Paho(broker.port, "acme/d2", "pw2", "persist-pub")
    for i in range(5):
        pub.publish("persist/x", f"q{i}", 1)
    pub.publish("persist/x", "zero", 0)  # QoS 0 to an offline session: dropped
    time.sleep(0.3)  # (a QoS 0 publish has no acknowledgement to wait for)
    back = Paho(broker.port, "acme/d1", "pw1", "persist", clean=False, expiry=300)
    assert back.session_present
    got = back.expect(6, 1.5)
    assert [(m.payload.decode(), m.dup) for m in got] == [(f"q{i}", False) for i in range(5)]
    back.close()
    fresh = Paho(broker.port, "acme/d1", "pw1", "persist", clean=True)
    assert not fresh.session_present
    fresh.close(), pub.close()


def test_v311_clean_session_zero_keeps_subscriptions(broker):
    sub = Paho(broker.port, "acme/d1", "pw1", "v3-persist", v5=False, clean=False)
    sub.subscribe("v3p/#", 1)
    sub.close()
    pub = Paho(broker.port, "acme/d2", "pw2", "v3p-pub", v5=False)
    pub.publish("v3p/a", "hello", 1)
    back = Paho(broker.port, "acme/d1", "pw1", "v3-persist", v5=False, clean=False)
    assert back.session_present
    assert [m.payload for m in back.expect(1)] == [b"hello"]
    back.close(), pub.close()


def test_shared_subscription_gives_each_message_to_one_member(broker):
    members = [Paho(broker.port, f"acme/d{i}", f"pw{i}", f"share-{i}") for i in (1, 2, 3)]
    for member in members:
        member.subscribe("$share/g1/jobs/#", 1)
    pub = Paho(broker.port, "acme/d4", "pw4", "share-pub")
    for i in range(30):
        pub.publish("jobs/x", f"j{i}", 1)
    time.sleep(1)
    received = [m.payload.decode() for member in members for m in member.expect(30, 0.5)]
    assert sorted(received) == sorted(f"j{i}" for i in range(30))  # each exactly once
    counts = [member.messages.qsize() for member in members]
    assert sum(counts) == 0
    for c in (*members, pub):
        c.close()


def test_dollar_topics_not_matched_by_leading_wildcards(broker):
    sub = Paho(broker.port, "acme/d1", "pw1", "dollar")
    sub.subscribe("#", 0)
    sub.subscribe("+/broker/#", 0)
    time.sleep(1.5)  # $SYS is published every second in this fixture
    assert all(not m.topic.startswith("$") for m in sub.expect(50, 0.5))
    sys_sub = Paho(broker.port, "acme/d2", "pw2", "dollar-sys")
    sys_sub.subscribe("$SYS/broker/clients/connected", 0)
    figures = [int(m.payload) for m in sys_sub.expect(3, 3)]  # retained, then each second
    assert figures and max(figures) >= 2
    sub.close(), sys_sub.close()


def test_tenants_never_see_each_other(broker):
    spy = Paho(broker.port, "other/d1", "other-pw", "spy")
    spy.subscribe("#", 2)
    spy.subscribe("$SYS/#", 0)
    spy.subscribe("$share/g/#", 0)
    victim_sub = Paho(broker.port, "acme/d1", "pw1", "victim")
    victim_sub.subscribe("secret/#", 1)
    victim = Paho(broker.port, "acme/d2", "pw2", "victim-pub")
    victim.publish("secret/plans", "attack at dawn", 1, retain=True)
    assert victim_sub.expect(1)[0].payload == b"attack at dawn"
    time.sleep(1.5)
    leaked = [m for m in spy.expect(100, 0.5) if b"dawn" in m.payload]
    assert leaked == []
    sys_figures = {m.topic: m.payload for m in spy.expect(100, 0.2)}
    for topic, payload in sys_figures.items():
        if topic == "$SYS/broker/clients/connected":
            assert int(payload) == 1  # only the spy itself
    victim.publish("secret/plans", "", 1, retain=True)
    for c in (spy, victim_sub, victim):
        c.close()


def test_no_local_and_subscription_identifiers(broker):
    client = Paho(broker.port, "acme/d1", "pw1", "nl")
    client.subscribe("nl/a", 1, noLocal=True)
    client.publish("nl/a", "mine", 1)
    assert client.nothing(0.5)
    other = Paho(broker.port, "acme/d2", "pw2", "sid")
    other.subscribe("nl/+", 1, subscription_id=7)
    other.subscribe("nl/#", 1, subscription_id=9)
    client.publish("nl/a", "x", 1)
    (message,) = other.expect(1)
    assert sorted(message.properties.SubscriptionIdentifier) == [7, 9]
    assert other.nothing(0.3)  # overlapping subscriptions: one copy
    client.close(), other.close()


def test_retain_handling_options(broker):
    pub = Paho(broker.port, "acme/d1", "pw1", "rh-pub")
    pub.publish("rh/t", "kept", 1, retain=True)
    never = Paho(broker.port, "acme/d2", "pw2", "rh-2")
    never.subscribe("rh/t", 1, retainHandling=2)
    assert never.nothing(0.4)
    once = Paho(broker.port, "acme/d3", "pw3", "rh-1")
    once.subscribe("rh/t", 1, retainHandling=1)
    assert len(once.expect(1)) == 1
    once.subscribe("rh/t", 1, retainHandling=1)  # already subscribed: not again
    assert once.nothing(0.4)
    pub.publish("rh/t", "", 1, retain=True)
    for c in (pub, never, once):
        c.close()


def test_message_expiry_and_properties_pass_through(broker):
    sub = Paho(broker.port, "acme/d1", "pw1", "exp-sub", clean=False, expiry=60)
    sub.subscribe("exp/#", 1)
    sub.close()
    pub = Paho(broker.port, "acme/d2", "pw2", "exp-pub")
    short = Properties(PacketTypes.PUBLISH)
    short.MessageExpiryInterval = 1
    pub.publish("exp/short", "gone", 1, properties=short)
    rich = Properties(PacketTypes.PUBLISH)
    rich.MessageExpiryInterval = 100
    rich.ContentType = "application/json"
    rich.ResponseTopic = "exp/reply"
    rich.CorrelationData = b"\x01\x02"
    rich.PayloadFormatIndicator = 1
    rich.UserProperty = [("k", "v"), ("k", "w")]
    pub.publish("exp/rich", '{"a":1}', 1, properties=rich)
    time.sleep(1.5)
    back = Paho(broker.port, "acme/d1", "pw1", "exp-sub", clean=False, expiry=60)
    got = back.expect(2, 2)
    assert [m.topic for m in got] == ["exp/rich"]
    props = got[0].properties
    assert props.ContentType == "application/json" and props.ResponseTopic == "exp/reply"
    assert props.CorrelationData == b"\x01\x02" and props.PayloadFormatIndicator == 1
    assert props.UserProperty == [("k", "v"), ("k", "w")]
    assert 95 <= props.MessageExpiryInterval <= 100
    back.close(), pub.close()


def test_topic_alias_from_client(broker):
    sub = Paho(broker.port, "acme/d1", "pw1", "alias-sub")
    sub.subscribe("alias/#", 0)
    pub = Paho(broker.port, "acme/d2", "pw2", "alias-pub")
    first = Properties(PacketTypes.PUBLISH)
    first.TopicAlias = 3
    pub.publish("alias/t", "one", 1, properties=first)
    again = Properties(PacketTypes.PUBLISH)
    again.TopicAlias = 3
    pub.publish("", "two", 1, properties=again)
    got = sub.expect(2)
    assert [(m.topic, m.payload) for m in got] == [("alias/t", b"one"), ("alias/t", b"two")]
    sub.close(), pub.close()


def test_unsubscribe_and_no_subscribers_reason(broker):
    client = Paho(broker.port, "acme/d1", "pw1", "unsub")
    client.subscribe("u/t", 1)
    result = client.client.unsubscribe(["u/t", "never/subscribed"])
    time.sleep(0.3)
    assert result[0] == 0
    info = client.publish("u/t", "x", 1)
    assert info.is_published()
    assert client.nothing(0.3)
    client.close()


def test_delayed_publish_in_memory(broker):
    sub = Paho(broker.port, "acme/d1", "pw1", "delay-sub")
    sub.subscribe("later/#", 1)
    pub = Paho(broker.port, "acme/d2", "pw2", "delay-pub")
    started = time.monotonic()
    pub.publish("$delayed/1/later/x", "tick", 1)
    (message,) = sub.expect(1, 4)
    assert message.topic == "later/x" and time.monotonic() - started >= 0.9
    info = pub.client.publish("$delayed/soon/later/x", "bad", 1)  # not a number: refused
    info.wait_for_publish(3)
    assert sub.nothing(1.5)
    sub.close(), pub.close()
