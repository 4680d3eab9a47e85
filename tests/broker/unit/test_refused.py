"""`refused`: each refusal told to the `client.refused` hook with its kind, code and who."""

from __future__ import annotations

from types import SimpleNamespace

from common.mqtt.packets import Connect
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker import refused
from data_plane.broker.admission import Disconnect, Refuse
from data_plane.broker.handshake import Refusal
from data_plane.broker.message import Message
from tests.broker.unit.fakes import FakeConnection, make_broker, told


def _told():
    broker = make_broker()
    return broker, FakeConnection(broker), told(broker, refused.HOOK)


async def test_connect_refusals_are_told_by_kind_with_who_the_connect_named():
    _, conn, calls = _told()
    connect = Connect("cid", username="acme/d7")
    refused.connect(conn, Refusal(RC.QUOTA_EXCEEDED, tenant="acme", quota="connections"), connect)
    refused.connect(conn, Refusal(RC.NOT_AUTHORIZED, tenant="acme", counts=("denied",)), connect)
    refused.connect(conn, Refusal(RC.BAD_USER_NAME_OR_PASSWORD), Connect("", username=None))
    assert [c[1:4] for c in calls] == [
        ("quota_exceeded", RC.QUOTA_EXCEEDED, "connections"),
        ("acl_denied", RC.NOT_AUTHORIZED, "not authorized"),
        ("auth_failed", RC.BAD_USER_NAME_OR_PASSWORD, "authentication failed"),
    ]
    assert calls[0][4] == {"tenant": "acme", "device": "d7", "client_id": "cid"}
    assert calls[2][4] == {"tenant": "", "device": "", "client_id": ""}


async def test_publish_refusals_name_the_quota_the_topic_or_the_reason():
    _, conn, calls = _told()
    refused.publish(conn, Disconnect(RC.PACKET_TOO_LARGE, "big", "message_size"), "t")
    refused.publish(conn, Refuse(RC.NOT_AUTHORIZED, "no", None, ("denied",)), "secret/x")
    refused.publish(conn, Disconnect(RC.TOPIC_ALIAS_INVALID), "t")
    assert [c[1:4] for c in calls] == [
        ("quota_exceeded", RC.PACKET_TOO_LARGE, "message_size"),
        ("acl_denied", RC.NOT_AUTHORIZED, "publish 'secret/x' not authorized"),
        ("malformed_packet", RC.TOPIC_ALIAS_INVALID, ""),
    ]


async def test_a_shutdown_is_no_refusal_and_a_will_is_told_for_its_gone_client():
    broker, conn, calls = _told()
    refused.disconnected(conn, RC.SERVER_SHUTTING_DOWN, "")
    refused.disconnected(conn, RC.KEEP_ALIVE_TIMEOUT, "")
    session = SimpleNamespace(client_id="c9", device="d9", connection=None)
    will = Message("w", b"", 0, False, tenant="acme", publisher="c9")
    refused.will(broker, session, will, "acl_denied", RC.NOT_AUTHORIZED, "no")
    refused.will(broker, None, will, "acl_denied", RC.NOT_AUTHORIZED, "no")
    assert [c[1:4] for c in calls] == [
        ("forced_disconnect", RC.KEEP_ALIVE_TIMEOUT, "0x8d"),
        ("acl_denied", RC.NOT_AUTHORIZED, "no"),
        ("acl_denied", RC.NOT_AUTHORIZED, "no"),
    ]
    gone = calls[1][0]
    assert (gone.tenant, gone.device, gone.client_id, gone.peer) == ("acme", "d9", "c9", "")
    assert calls[2][0].client_id == "c9"  # the will's publisher, with no session
