"""A tenant's rules on the running platform: a live rule that republishes and calls a webhook
(broker → archive → the rules role's Spark job → MQTT and HTTP), then the same history read
again: a preview, a run with `new-only` (handed by the web process to the Celery worker through
Redis, run on the worker's Spark: what the live job did already is skipped), a run from the
portal's "Run over history" in Chromium that fires a new rule's actions over the past, and a
cancel."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.broker.clients import Paho
from tests.e2e.conftest import Platform, eventually
from tests.spark.conftest import Receiver, signature_ok

pytestmark = pytest.mark.e2e
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
SQL = 'SELECT payload.temp AS t, payload.n AS n, clientid FROM "sensors/+/temp" WHERE payload.temp > 30'
SECRET = "whsec-e2e-rules-secret-0000001"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture(scope="module")
def device(tenant: dict[str, Any]) -> dict[str, str]:
    made = tenant["api"].post("/api/v1/devices", {"name": "k1", "client_id_policy": "any"})
    assert made.status_code == 201, made.text
    return made.json()


@pytest.fixture(scope="module")
def history(platform: Platform, tenant: dict[str, Any], device, receiver) -> dict[str, Any]:
    """The live rule `hot`, proven live, then ten readings (temps 25-34) it acts on as they come:
    the history the runs below read again."""
    api = tenant["api"]
    rule = {
        "name": "hot",
        "sql": SQL,
        "actions": [
            {"type": "republish", "topic": "alerts/${clientid}", "qos": 1},
            {"type": "webhook", "url": receiver.url, "secret": SECRET},
        ],
    }
    made = api.post("/api/v1/rules", rule)
    assert made.status_code == 201, made.text
    saved = time.monotonic()
    port = platform.port("MQTT_PORT")
    watcher = Paho(port, device["username"], device["password"], "alerts-watcher")
    watcher.subscribe("alerts/#", 1)
    sensor = Paho(port, device["username"], device["password"], "k1")
    # The rule is live once a probe comes back republished (the job reads rules as they change).
    deadline, probe, alerts = time.monotonic() + 120, 0, []
    while not alerts:
        assert time.monotonic() < deadline, "the live rule never acted"
        sensor.publish("sensors/k1/temp", json.dumps({"temp": 99, "n": -1 - probe}), 1)
        probe += 1
        alerts = watcher.expect(1, 1)
    first_match = time.monotonic() - saved  # within the last probe's second
    started = datetime.now(UTC)
    for n, temp in enumerate(range(25, 35)):
        sensor.publish("sensors/k1/temp", json.dumps({"temp": temp, "n": n}), 1)
    live = []
    deadline = time.monotonic() + 60
    while len(live) < 4 and time.monotonic() < deadline:
        for message in watcher.expect(1, 2):
            body = json.loads(message.payload)
            if body["n"] >= 0:
                live.append((message.topic, body["t"], body["n"]))
    sensor.close()
    watcher.close()
    return {
        "started": started,
        "live": sorted(live, key=lambda x: x[2]),
        "probes": probe,
        "first_match": first_match,
    }


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def wait_run(api, name: str, run_id: str, within: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        run = api.get(f"/api/v1/rules/{name}/runs/{run_id}").json()
        if run["state"] in ("done", "failed", "cancelled"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(1)


def test_a_live_rule_republishes_and_calls_its_webhook(history, receiver):
    assert history["live"] == [("alerts/k1", t, t - 25) for t in range(31, 35)]
    calls = receiver.wait(history["probes"] + 4, 60)
    bodies = [json.loads(call["body"]) for call in calls]
    assert sorted(b["n"] for b in bodies if b["n"] >= 0) == [6, 7, 8, 9]
    assert all(signature_ok(call, SECRET) for call in calls)


def test_the_rule_shows_its_recent_latency_and_the_journey_the_time_to_each_action(tenant, history):
    """Issue 43: the live feed makes the rules act within a fraction of a second; the rule's
    page (API) says how fast over the last minutes, the journey how long each action took."""
    api = tenant["api"]
    metrics = eventually(
        lambda: api.get("/api/v1/rules/hot").json()["metrics"],
        lambda m: m["latency_p50_ms"] is not None and m["actions_ok"] >= 8,
    )
    assert 0 < metrics["latency_p50_ms"] <= metrics["latency_p99_ms"]
    assert metrics["latency_p50_ms"] < 2000, metrics  # seconds before the live feed
    # Saved to its first action (the broker and the job pick a rule up as it changes; the
    # benchmark's target, on a quiet machine, is 2 s).
    assert history["first_match"] < 10, history["first_match"]
    print(f"first match {history['first_match']:.1f}s after saving; {metrics}")
    since = iso(history["started"] - timedelta(seconds=5))
    query = f"topic=sensors/k1/temp&outcome=rule_matched,rule_action_ok&from={since}"
    rows = eventually(
        lambda: api.get(f"/api/v1/journey?{query}").json()["results"],
        lambda rows: any(r["outcome"] == "rule_action_ok" for r in rows),
    )
    timed = [r for r in rows if r["outcome"] in ("rule_matched", "rule_action_ok")]
    assert timed and all(r["latency_ms"] is not None and r["latency_ms"] >= 0 for r in timed)


def test_a_run_over_history_skips_what_the_live_job_did(platform, tenant, history, receiver):
    api = tenant["api"]
    probes = history["probes"]
    receiver.wait(probes + 4, 60)  # the live job has done its actions (each probe's too)
    time.sleep(2)
    span = {
        "from": iso(history["started"] - timedelta(minutes=10)),
        "to": iso(datetime.now(UTC)),
    }
    # The archive takes the live segments within seconds: the preview sees every reading.
    deadline = time.monotonic() + 60
    while True:
        preview = api.post("/api/v1/rules/hot/runs", span)
        assert preview.status_code == 200, preview.text
        if preview.json()["considered"] >= probes + 10:
            break
        if time.monotonic() > deadline:
            journey = api.get("/api/v1/journey", params={"topic": "sensors/#"}).json()
            raise AssertionError(f"{preview.json()}\n{journey}\n{history}")
        time.sleep(2)
    assert preview.json()["matched"] == probes + 4
    assert {o["n"] for o in preview.json()["outputs"] if o["n"] >= 0} <= {6, 7, 8, 9}
    calls_before = len(receiver.calls)

    started = api.post("/api/v1/rules/hot/runs", {**span, "mode": "run", "actions": "new-only"})
    assert started.status_code == 202, started.text
    run = wait_run(api, "hot", started.json()["id"])
    assert run["state"] == "done", run
    assert (run["considered"], run["matched"]) == (probes + 10, probes + 4), run
    # Both actions of each message were done by the live job already: nothing fires twice.
    assert (run["actions_fired"], run["actions_skipped"]) == (0, 2 * (probes + 4)), run
    time.sleep(2)
    assert len(receiver.calls) == calls_before


def test_a_run_is_cancelled(tenant, history):
    api = tenant["api"]
    span = {"from": iso(history["started"] - timedelta(hours=2)), "to": iso(datetime.now(UTC))}
    started = api.post("/api/v1/rules/hot/runs", {**span, "mode": "run", "actions": "none"})
    assert started.status_code == 202, started.text
    cancelled = api.post(f"/api/v1/rules/hot/runs/{started.json()['id']}/cancel")
    assert cancelled.status_code == 202, cancelled.text
    assert wait_run(api, "hot", started.json()["id"])["state"] == "cancelled"


@pytest.mark.browser
def test_run_over_history_from_the_portal_fires_a_new_rules_actions(
    platform, tenant, history, receiver, page
):
    """A rule made after the readings: its run from the portal fires its webhook for each
    reading it matches, once."""
    api = tenant["api"]
    made = api.post(
        "/api/v1/rules",
        {
            "name": "late",
            "sql": SQL.replace("> 30", "> 32"),
            "actions": [{"type": "webhook", "url": receiver.url + "/late", "secret": SECRET}],
            "enabled": False,  # only the run over history acts
        },
    )
    assert made.status_code == 201, made.text
    page.goto(platform.url("/login/"))
    page.fill("input[name=email]", tenant["email"])
    page.fill("input[name=password]", tenant["password"])
    page.click("button[type=submit]")
    page.wait_for_url(platform.url("/"))
    page.goto(platform.url("/rules/late/"))
    page.wait_for_load_state("load")
    page.click("#history-preview")
    result = page.locator("#history-preview-result")
    expected = 2 + history["probes"]  # temps 33, 34 and the probes at 99
    expect(result).to_have_attribute("data-matched", str(expected), timeout=30_000)
    page.select_option("#history-actions", "new-only")
    page.locator("#history-run").click()
    progress = page.locator("#history-progress")
    expect(progress).to_have_attribute("data-state", "done", timeout=240_000)
    late = [c for c in receiver.calls if c["path"] == "/hook/late"]
    deadline = time.monotonic() + 10
    while len(late) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        late = [c for c in receiver.calls if c["path"] == "/hook/late"]
    assert sorted(json.loads(c["body"])["n"] for c in late if json.loads(c["body"])["n"] >= 0) == [
        8,
        9,
    ]
    assert len(late) == expected


def test_a_webhook_that_kept_failing_is_a_dead_letter_and_is_replayed(platform, tenant, device):
    """Its receiver down through every retry: the output waits as a dead letter, listed with
    its error, until the tenant replays it (receiver back up): delivered once, then gone."""
    api = tenant["api"]
    failing = Receiver(statuses=[503] * 1000)
    try:
        made = api.post(
            "/api/v1/rules",
            {
                "name": "flaky",
                "sql": 'SELECT payload.n AS n FROM "flaky/#"',
                "actions": [{"type": "webhook", "url": failing.url, "secret": SECRET}],
            },
        )
        assert made.status_code == 201, made.text
        sensor = Paho(platform.port("MQTT_PORT"), device["username"], device["password"], "fk")
        deadline, n = time.monotonic() + 120, 0
        while not failing.calls:  # until the live job has the rule
            assert time.monotonic() < deadline, "the rule never called its webhook"
            sensor.publish("flaky/1", json.dumps({"n": n}), 1)
            n += 1
            time.sleep(2)
        sensor.close()
        time.sleep(3)  # calls for the last probes may still be on their way
        called = {json.loads(call["body"])["n"] for call in failing.calls}

        def letters() -> list[dict[str, Any]]:
            answer = api.get("/api/v1/rules/flaky/dead-letters")
            assert answer.status_code == 200, answer.text
            return answer.json()["results"]

        deadline = time.monotonic() + 90
        while len(letters()) < len(called):
            assert time.monotonic() < deadline, (letters(), called)
            time.sleep(1)
        assert all("503" in letter["error"] for letter in letters()), letters()
        failing.statuses.clear()  # the receiver is back
        replayed = api.post("/api/v1/rules/flaky/dead-letters/replay")
        assert replayed.status_code == 200, replayed.text
        assert replayed.json()["delivered"] == len(called), replayed.json()
        assert {json.loads(c["body"])["n"] for c in failing.ok_calls()} == called
        assert letters() == []
    finally:
        failing.close()
