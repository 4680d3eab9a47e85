"""Placement of tenants on a machine's workers (data_plane.cluster.affinity), without processes."""

from __future__ import annotations

import pytest

from data_plane.broker.handover import HandoverCounts
from data_plane.cluster.affinity import Affinity, homes, parse_large


class FakeCluster:
    """What Affinity reads of the cluster: this worker's description and the live others."""

    def __init__(self, slot: str, others: list[dict]) -> None:
        self.info = {"node": f"n{slot}", "host": "h", "mqtt_port": 1883, "slot": slot}
        self.info.update(handover=f"ho-{slot}", started=10.0)
        self.alive = {o["node"]: o for o in others}


def worker(slot: str, started: float = 10.0, **extra) -> dict:
    info = {"node": f"n{slot}-{started}", "host": "h", "mqtt_port": 1883, "slot": slot}
    return {**info, "handover": f"ho-{slot}-{started}", "started": started, **extra}


def test_the_home_is_stable_and_moves_only_when_its_worker_leaves():
    tenants = [f"t{i}" for i in range(200)]
    three = {t: homes(t, ["0", "1", "2"])[0] for t in tenants}
    assert set(three.values()) == {"0", "1", "2"}  # spread
    assert three == {t: homes(t, ["2", "0", "1"])[0] for t in tenants}  # order does not matter
    two = {t: homes(t, ["0", "1"])[0] for t in tenants}
    moved = [t for t in tenants if two[t] != three[t]]
    assert moved and all(three[t] == "2" for t in moved)  # only the leaver's tenants move


def test_every_worker_agrees_and_only_the_others_hand_over():
    others = [worker("1"), worker("2")]
    views = {
        "0": Affinity(FakeCluster("0", others), HandoverCounts(), {}),
        "1": Affinity(FakeCluster("1", [worker("0"), worker("2")]), HandoverCounts(), {}),
    }
    for tenant in (f"t{i}" for i in range(50)):
        home = homes(tenant, ["0", "1", "2"])[0]
        for slot, view in views.items():
            answer = view.home(tenant, "c")
            assert (answer is None) == (home == slot)
            if home == "2":
                assert answer == "ho-2-10.0"


def test_other_machines_ports_and_workers_without_hand_over_are_not_workers_here():
    others = [worker("1", host="elsewhere"), worker("2", mqtt_port=1884), worker("3")]
    del others[2]["handover"]
    view = Affinity(FakeCluster("0", others), HandoverCounts(), {})
    assert list(view.workers()) == ["0"]
    assert all(view.home(f"t{i}", "c") is None for i in range(20))  # alone: always here


def test_a_restarted_worker_takes_its_slot_from_the_dead_one():
    dead, new = worker("1", started=5.0), worker("1", started=50.0)
    view = Affinity(FakeCluster("0", [dead, new]), HandoverCounts(), {})
    assert view.workers() == {"0": "ho-0", "1": "ho-1-50.0"}


def test_a_large_tenant_spreads_over_k_workers_by_client_id():
    slots = ["0", "1", "2", "3"]
    chosen = homes("big", slots, 2)
    outside = next(s for s in slots if s not in chosen)
    others = [worker(s) for s in slots if s != outside]
    view = Affinity(FakeCluster(outside, others), HandoverCounts(), {"big": 2})
    targets = {view.home("big", f"c{i}") for i in range(40)}
    assert targets == {f"ho-{s}-10.0" for s in chosen}  # both, never a third
    assert view.home("big", "c7") == view.home("big", "c7")  # one client id, one worker
    inside = Affinity(FakeCluster(chosen[1], [worker(s) for s in slots if s != chosen[1]]),
                      HandoverCounts(), {"big": 2})  # fmt: skip
    assert all(inside.home("big", f"c{i}") is None for i in range(40))  # among the K: stays


def test_large_tenants_setting():
    assert parse_large("acme=4, big=2,solo") == {"acme": 4, "big": 2, "solo": 2}
    assert parse_large(None) == {}
    with pytest.raises(ValueError):
        parse_large("acme=0")
