"""The cluster steers the broker through its hooks (data_plane.broker.hooks), never by
replacing a method of it: a session moving here is watched for duplicates from the moment the
broker wires it (`session.adopted`), and a node cut off from the bus refuses new clients with
0x88 (`client.redirect`). A real broker; the cluster's rooms with fakes for what they need."""

from __future__ import annotations

from types import SimpleNamespace

from common.mqtt.packets import Subscription
from common.mqtt.reason_codes import ReasonCode
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from data_plane.broker.session import Delivery
from data_plane.broker.stats import Redirect
from data_plane.cluster.bus import Bus
from data_plane.cluster.exactly import Origins
from data_plane.cluster.keys import Keys
from data_plane.cluster.membership import Membership
from data_plane.cluster.routes import RouteTable
from data_plane.config import BrokerConfig
from data_plane.tenancy.static import StaticAuthenticator
from tests.broker.test_ports import FakeClient


def _broker() -> Broker:
    auth = StaticAuthenticator({"acme": {"devices": {"d1": {"password": "p"}}}})
    return Broker(BrokerConfig(port=0, ws_port=0, sys_interval=0), auth)


async def test_a_session_moving_here_is_watched_from_the_moment_the_broker_wires_it():
    broker = _broker()
    origins = Origins("b")
    origins.attach(broker)
    origins.expect(("acme", "s"))
    client = FakeClient("s")
    client.write_paused = False  # a client that reads: each delivery is sent at once
    session, _ = broker.open_session(client, "acme", "s", "d1", False, 3600, 1000)
    broker.subscribe(session, Subscription("t/#", 1), None)
    assert ("acme", "s") in origins.open  # its move window opened as it was wired
    assert "adopt" not in vars(broker)  # the broker's own method, not a cluster's wrapper
    # The same message (published at node "c" as its 7th) directly and through the old node's
    # relay: delivered once.
    for _copy in range(2):
        message = Message("t/x", b"once", 1, False, tenant="acme", publisher="p")
        message.cluster_origin = ("c", 7)  # where the cluster says it was published
        session.deliver(Delivery(message, 1, False))
    assert origins.duplicates == 1 and len(client.sent) == 1


def test_a_node_cut_off_from_the_bus_refuses_new_clients_through_the_redirect_hook():
    broker = _broker()
    bus = Bus("a", Keys("test"), redis=None, reader=None, heartbeat=2.0)
    membership = Membership(bus, {}, RouteTable(), own_routes=SimpleNamespace(), tasks=[])
    membership.guard(broker.hooks)
    membership.last_ok = float("-inf")  # no beat got through: cut off
    answer = broker.redirect(object(), object())
    assert answer.reason_code == ReasonCode.SERVER_UNAVAILABLE and membership.refused == 1
    membership.last_ok = 1e18  # the bus answers again: the client is let in
    assert broker.redirect(object(), object()) is None
    assert broker.redirect == broker.hooks.redirect  # the broker's own, fed by the hooks
    broker.evacuate(Redirect("elsewhere:1883"))  # the operator's evacuation still wins
    assert broker.redirect(object(), object()).reference == "elsewhere:1883"
