"""`wills`: whether a will may go out when it goes (the checks of any PUBLISH as they stand
then), and what `go_out` does either way."""

from __future__ import annotations

from common.access.acl import AclEntry, AclPolicy
from common.mqtt.packets import Subscription
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker import wills
from data_plane.broker.message import Message
from data_plane.broker.retained import RetainedStore
from data_plane.broker.session import Session
from tests.broker.unit.fakes import FakeConnection, make_broker, open_session, told


def _will(topic: str = "status/d1", retain: bool = False) -> Message:
    return Message(topic, b"gone", 0, retain, tenant="acme", publisher="c-d1", device="d1")


def test_dollar_topics_the_acl_and_the_retained_quota_refuse_a_will():
    session = Session("acme", "c-d1", "d1")
    session.acl = AclPolicy(
        [AclEntry("publish", False, "secret/#")], tenant="acme", device="d1", default_allow=True
    )
    retained = RetainedStore()
    assert wills.refusal(_will("$SYS/x"), session, retained).kind == "acl_denied"
    assert wills.refusal(_will("secret/x"), session, retained).reason_code == RC.NOT_AUTHORIZED
    assert wills.refusal(_will(), None, retained) is None  # a restored session: broker rules
    session.quota = {"max_retained_messages": 1}
    retained.set(Message("other", b"x", 0, True, tenant="acme"))
    assert wills.refusal(_will(retain=True), session, retained) == wills.WillRefused(
        "quota_exceeded", RC.QUOTA_EXCEEDED, "retained"
    )


async def test_go_out_publishes_an_allowed_will_and_counts_a_refused_one():
    broker = make_broker()
    subscriber = FakeConnection(broker, device="d2")
    broker.subscribe(open_session(broker, subscriber), Subscription("#", 0), None)
    published = told(broker, "session.will")
    refusals = told(broker, "client.refused")
    assert wills.go_out(broker, None, _will()).reached == 1
    assert len(subscriber.sent) == 1 and len(published) == 1
    assert wills.go_out(broker, None, _will("$SYS/x")).reached == 0
    assert broker.stats["acme"].denied == 1
    assert [r[1] for r in refusals] == ["acl_denied"]
