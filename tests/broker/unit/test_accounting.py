"""`accounting.Accounts`: the one writer of the tenants' statistics and billable units."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from data_plane.broker.accounting import Accounts
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message


def test_a_devices_publish_is_billed_and_the_platforms_is_counted_apart():
    accounts = Accounts(Hooks())
    device = Message("t", b"x" * 6000, 0, False, tenant="acme", publisher="c1", device="d1")
    system = Message("t", b"x", 0, False, tenant="acme", publisher="$events", device="")
    assert accounts.received(device) is True and accounts.received(system) is False
    stats = accounts.stats["acme"]
    assert (stats.messages_received, stats.system_received) == (2, 1)
    assert stats.message_units == 2 and dict(stats.device_units) == {"d1": 2}  # 5 KiB units


def test_deliveries_to_devices_are_billed_to_the_receiver_and_told():
    hooks = Hooks()
    heard: list = []
    hooks.add("message.delivered", lambda *args: heard.append(args))
    accounts = Accounts(hooks)
    message = Message("t", b"x", 0, False, tenant="acme", publisher="c1", device="d1")
    delivery = SimpleNamespace(message=message)
    device = SimpleNamespace(tenant="acme", client_id="c2", device="d2")
    accounts.delivered(device, delivery, 1)
    accounts.delivered(
        SimpleNamespace(tenant="acme", client_id="$portal-1", device=""), delivery, 1
    )
    stats = accounts.stats["acme"]
    assert (stats.messages_sent, stats.system_sent, dict(stats.device_units)) == (2, 1, {"d2": 1})
    assert heard[0] == (device, delivery)  # the hook hears each delivery


def test_refusals_count_their_quota_through_the_hooks_and_only_known_counters():
    hooks = Hooks()
    heard: list = []
    hooks.add("quota.exceeded", lambda *args: heard.append(args))
    accounts = Accounts(hooks)
    accounts.refused("acme", "message_size", ("dropped",))
    assert accounts.stats["acme"].dropped == 1 and heard == [("acme", "message_size")]
    with pytest.raises(ValueError):
        accounts.refused("acme", None, ("connected",))


def test_a_connection_is_counted_and_its_connect_billed():
    accounts = Accounts(Hooks())
    accounts.connected("acme", "d1")
    assert accounts.connections("acme") == 1 and accounts.stats["acme"].message_units == 1
    accounts.disconnected("acme")
    assert accounts.connections("acme") == 0
