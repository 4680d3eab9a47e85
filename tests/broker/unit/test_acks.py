"""`acks.Acks` through a fake connection: a QoS 1/2 PUBLISH acknowledged only once its durable
copies are committed, a failed commit answered as each version can, refusals and PUBREL."""

from __future__ import annotations

import asyncio

from common.mqtt.codec import Reader
from common.mqtt.packets import MQTT_3_1_1, MQTT_5_0, PacketType, Publish, PubRel
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker.acks import Acks
from data_plane.broker.resends import RecentPublishes
from tests.broker.unit.fakes import FakeConnection, make_broker, open_session


class Admission:
    recent = RecentPublishes()


def _acks(version: int = MQTT_5_0):
    broker = make_broker()
    conn = FakeConnection(broker, version=version)
    conn.admission = Admission()
    open_session(broker, conn)
    return broker, conn, Acks(conn)


def _sent(conn: FakeConnection) -> list:
    reader = Reader(server_side=False, protocol_version=conn.protocol_version)
    return [packet for data in conn.sent for packet in reader.feed(data)]


async def test_qos1_is_acknowledged_at_once_without_commits_and_qos0_never():
    _, conn, acks = _acks()
    acks.accepted(Publish("t", b"", qos=0), 0, [])
    acks.accepted(Publish("t", b"", qos=1, packet_id=5), RC.NO_MATCHING_SUBSCRIBERS, [])
    (puback,) = _sent(conn)
    assert puback.type is PacketType.PUBACK
    assert (puback.packet_id, puback.reason_code) == (5, RC.NO_MATCHING_SUBSCRIBERS)


async def test_the_acknowledgement_waits_for_the_commit_of_every_durable_copy():
    loop = asyncio.get_running_loop()
    _, conn, acks = _acks()
    commit = loop.create_future()
    acks.accepted(Publish("t", b"", qos=1, packet_id=9), 0, [commit])
    await asyncio.sleep(0)
    assert conn.sent == []  # not before the commit
    commit.set_result(None)
    await asyncio.sleep(0.01)
    assert [p.packet_id for p in _sent(conn)] == [9]


async def test_a_failed_commit_is_a_negative_ack_on_5_and_a_close_on_311():
    loop = asyncio.get_running_loop()
    for version in (MQTT_5_0, MQTT_3_1_1):
        _, conn, acks = _acks(version)
        commit = loop.create_future()
        commit.set_exception(OSError("database down"))
        acks.accepted(Publish("t", b"", qos=1, packet_id=2), 0, [commit])
        await asyncio.sleep(0.01)
        if version == MQTT_5_0:
            (puback,) = _sent(conn)
            assert puback.reason_code == RC.UNSPECIFIED_ERROR and not conn.closed
            assert puback.properties["reason_string"] == "persistent storage unavailable"
        else:
            assert conn.sent == [] and conn.closed  # 3.1.1 cannot say it: the client resends


async def test_a_refused_publish_counts_a_drop_and_311_acknowledges_it_with_0():
    broker, conn, acks = _acks(MQTT_3_1_1)
    acks.refuse(Publish("t", b"", qos=1, packet_id=3), RC.NOT_AUTHORIZED, "no")
    (puback,) = _sent(conn)
    assert puback.reason_code == 0
    assert broker.stats["acme"].dropped == 1


async def test_qos2_is_held_until_pubrel_and_an_unknown_pubrel_gets_0x92():
    _, conn, acks = _acks()
    acks.accepted(Publish("t", b"", qos=2, packet_id=4), 0, [])
    assert 4 in conn.session.inbound_qos2
    acks.pubrel(PubRel(4))
    acks.pubrel(PubRel(8))
    pubrec, pubcomp, unknown = _sent(conn)
    assert pubrec.type is PacketType.PUBREC
    assert (pubcomp.packet_id, pubcomp.reason_code) == (4, 0)
    assert (unknown.packet_id, unknown.reason_code) == (8, RC.PACKET_IDENTIFIER_NOT_FOUND)
    assert conn.session.inbound_qos2 == set()
