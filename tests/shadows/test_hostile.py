"""One tenant's hostile value must not fail another tenant's requests (issue 44, points 3 and 5).

Shadow updates of every tenant share a batch (one transaction, `data_plane.shadows.batches`):
a value Postgres refuses (`NaN`, `Infinity`, a NUL character) once failed the whole batch, and
another tenant's updates with it. Here an attacker's hostile updates are interleaved with a
victim's valid ones, in the same batching windows, on a real broker and Postgres: every victim
update is accepted and stored, the attacker gets AWS's 400 naming the problem, and the broker
logs no traceback."""

from __future__ import annotations

import json
import time

import pytest

from tenants.models import Shadow
from tests.shadows.conftest import Watcher, make_fleet

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = [
    b'{"state": {"reported": {"t": NaN}}}',
    b'{"state": {"reported": {"t": Infinity}}, "clientToken": "inf"}',
    b'{"state": {"desired": {"t": [-Infinity]}}}',
    b'{"state": {"reported": {"t": 1}}, "clientToken": "a\\u0000"}',
    b'{"state": {"reported": {"t": 1}}, "clientToken": "\\ud800"}',
    b'{"state": {"reported": {"\\u0000": 1}}}',
    b'{"state": {"reported": ' + b'{"a":' * 1200 + b"1" + b"}" * 1202,
    b"[" * 5000,
]
ROUNDS = 6


def _replies(watcher: Watcher, count: int, timeout: float = 15.0) -> list[tuple[str, dict]]:
    got: list[tuple[str, dict]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            message = watcher.paho.messages.get(timeout=0.2)
        except Exception:
            continue
        got.append((message.topic, json.loads(message.payload)))
    return got


def test_hostile_values_fail_no_other_tenants_shadow_batch(tls_broker, tmp_path):
    attacker_fleet = make_fleet(tmp_path, "atk")
    victim_fleet = make_fleet(tmp_path, "vic")
    attacker_fleet.device("bad")
    victim_fleet.device("lamp")
    attacker = Watcher(
        tls_broker.port, attacker_fleet, "bad", subscribe="$aws/things/bad/shadow/update/+"
    )
    victim = Watcher(
        tls_broker.port, victim_fleet, "lamp", subscribe="$aws/things/lamp/shadow/update/accepted"
    )
    victim.paho.subscribe("$aws/things/lamp/shadow/update/rejected", 1)
    try:
        sent = 0
        refusals: list[dict] = []
        for _ in range(ROUNDS):
            # Interleaved, unacknowledged (QoS 0): they reach the service within one window.
            for i, hostile in enumerate(HOSTILE):
                attacker.paho.client.publish("$aws/things/bad/shadow/update", hostile, 0)
                if i < 8:  # the victim's 8 a round: under AWS's 10 in flight per client
                    sent += 1
                    body = {"state": {"reported": {"n": sent}}, "clientToken": f"v{sent}"}
                    victim.paho.client.publish(
                        "$aws/things/lamp/shadow/update", json.dumps(body), 0
                    )
            answers = _replies(victim, 8)
            assert [t for t, _ in answers] == ["$aws/things/lamp/shadow/update/accepted"] * 8, (
                answers
            )
            refusals += [body for _, body in _replies(attacker, len(HOSTILE))]
        assert len(refusals) == ROUNDS * len(HOSTILE)
        assert {body["code"] for body in refusals} == {400}
        messages = {body["message"] for body in refusals}
        assert "Invalid JSON: NaN and Infinity are not JSON numbers" in messages
        assert "JSON contains too many levels of nesting; maximum is 6" in messages
        assert any("NUL" in m for m in messages) and any("surrogate" in m for m in messages)
        shadow = Shadow.objects.get(device__tenant=victim_fleet.tenant, name="")
        assert shadow.version == sent  # every one stored
        assert shadow.state == {"reported": {"n": sent}}
        assert not Shadow.objects.filter(device__tenant=attacker_fleet.tenant, present=True)
        assert attacker.paho.client.is_connected() and victim.paho.client.is_connected()
    finally:
        attacker.close()
        victim.close()
    assert "Traceback" not in (tls_broker.folder / "broker.log").read_text()
