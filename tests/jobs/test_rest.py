"""Jobs and device groups through the REST API, seen by the devices on AWS's raw topics (paho,
MQTT 5), and from the attacker's side: another tenant's job ids, group names and device names
are not there for it, a thing of the same name elsewhere sees none of these jobs, and a device
cannot read, change or forge another thing's jobs topics."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.devices import services as device_services
from tenants.jobs import services as job_services
from tenants.tenant import services as tenant_services
from tests.shadows.conftest import Fleet, Watcher, api_client

pytestmark = pytest.mark.django_db(transaction=True)

NOT_AUTHORIZED = 0x87


def acks_of(watcher: Watcher) -> dict[int, int]:
    """PUBACK reason codes by message id, as they arrive."""
    acks: dict[int, int] = {}
    watcher.paho.client.on_publish = lambda c, u, mid, rc, props: acks.__setitem__(mid, rc.value)
    return acks


def send(watcher: Watcher, topic: str, body: dict, acks: dict | None = None) -> int:
    info = watcher.paho.client.publish(topic, json.dumps(body).encode(), 1)
    info.wait_for_publish(5)
    if acks is None:
        return 0
    deadline = time.monotonic() + 5
    while info.mid not in acks and time.monotonic() < deadline:
        time.sleep(0.01)
    return acks[info.mid]


def by_topic(watcher: Watcher, count: int) -> dict[str, dict]:
    got = watcher.get(count)
    assert len(got) == count, got
    return dict(got)


def test_rest_jobs_and_groups_as_devices_see_them(jobs_broker, fleet):
    for name in ("a", "b", "c"):
        fleet.device(name)
    api = api_client(fleet.tenant)
    jobs = "$aws/things/{}/jobs/#"
    a = Watcher(jobs_broker.port, fleet, "a", subscribe=jobs.format("a"))
    c = Watcher(jobs_broker.port, fleet, "c", subscribe=jobs.format("c"))
    try:
        made = api.post("/api/v1/groups", {"name": "kitchen", "devices": ["b"]}, format="json")
        assert made.status_code == 201 and made.json()["devices"] == ["b"]
        added = api.post("/api/v1/groups/kitchen/devices", {"devices": ["c"]}, format="json")
        assert added.json()["devices"] == ["b", "c"]
        again = api.post("/api/v1/groups", {"name": "kitchen"}, format="json")
        assert again.status_code == 409
        ghost = api.post("/api/v1/groups/kitchen/devices", {"devices": ["ghost"]}, format="json")
        assert ghost.status_code == 400 and "ghost" in ghost.json()["error"]["message"]

        # A bad request names its problem.
        base = {"job_id": "ota", "document": {"url": "https://x/fw.bin"}}
        for targets, word in (({"devices": ["ghost"]}, "ghost"), ({"groups": ["attic"]}, "attic")):
            bad = api.post("/api/v1/jobs", {**base, "targets": targets}, format="json")
            assert bad.status_code == 400 and word in bad.json()["error"]["message"], bad.json()
        for field, value in (("job_id", "a b"), ("document", [1]), ("timeout_minutes", 0)):
            body = {**base, "targets": {"devices": ["a"]}, field: value}
            bad = api.post("/api/v1/jobs", body, format="json")
            assert bad.status_code == 400 and field in json.dumps(bad.json()), bad.json()

        body = {**base, "targets": {"devices": ["a"], "groups": ["kitchen"]}}
        created = api.post("/api/v1/jobs", body, format="json")
        assert created.status_code == 201, created.content
        job = created.json()
        assert job["status"] == "IN_PROGRESS" and job["process_details"]["QUEUED"] == 3
        assert [(e["device"], e["status"]) for e in job["executions"]] == [
            ("a", "QUEUED"),
            ("b", "QUEUED"),
            ("c", "QUEUED"),
        ]
        assert api.post("/api/v1/jobs", body, format="json").status_code == 409
        assert [j["job_id"] for j in api.get("/api/v1/jobs").json()["results"]] == ["ota"]

        # The devices were told, in AWS's shapes.
        told = by_topic(a, 2)
        listed = told["$aws/things/a/jobs/notify"]
        assert set(listed) == {"timestamp", "jobs"} and list(listed["jobs"]) == ["QUEUED"]
        summary = listed["jobs"]["QUEUED"][0]
        assert set(summary) == {
            "jobId",
            "queuedAt",
            "lastUpdatedAt",
            "versionNumber",
            "executionNumber",
        }
        assert (summary["jobId"], summary["versionNumber"]) == ("ota", 1)
        nxt = told["$aws/things/a/jobs/notify-next"]["execution"]
        assert (nxt["jobId"], nxt["thingName"], nxt["status"]) == ("ota", "a", "QUEUED")
        assert nxt["jobDocument"] == base["document"] and nxt["statusDetails"] == {}
        assert len(c.get(2)) == 2  # a group's member is told too

        # a starts it (raw topics, its clientToken echoed); the job is cancelled without force:
        # the queued executions end, a's goes on to its end, as AWS.
        send(a, "$aws/things/a/jobs/start-next", {"clientToken": "t-1"})
        answer = by_topic(a, 2)  # the answer, and notify (its pending list changed)
        started = answer["$aws/things/a/jobs/start-next/accepted"]
        assert started["clientToken"] == "t-1" and started["execution"]["status"] == "IN_PROGRESS"
        assert answer["$aws/things/a/jobs/notify"]["jobs"]["IN_PROGRESS"][0]["jobId"] == "ota"
        cancelled = api.post("/api/v1/jobs/ota/cancel", {}, format="json")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELED"
        states = {e["device"]: e["status"] for e in cancelled.json()["executions"]}
        assert states == {"a": "IN_PROGRESS", "b": "CANCELED", "c": "CANCELED"}
        gone = by_topic(c, 2)
        assert gone["$aws/things/c/jobs/notify"]["jobs"] == {}
        assert "execution" not in gone["$aws/things/c/jobs/notify-next"]
        send(c, "$aws/things/c/jobs/ota/update", {"status": "SUCCEEDED", "clientToken": "t-2"})
        late = by_topic(c, 1)["$aws/things/c/jobs/ota/update/rejected"]
        assert late["code"] == "TerminalStateReached" and late["clientToken"] == "t-2"
        send(a, "$aws/things/a/jobs/ota/update", {"status": "SUCCEEDED"})
        assert "$aws/things/a/jobs/ota/update/accepted" in by_topic(a, 3)
        final = api.get("/api/v1/jobs/ota").json()
        assert {e["device"]: e["status"] for e in final["executions"]}["a"] == "SUCCEEDED"
        audit = [(e["action"], e["target"]) for e in api.get("/api/v1/audit").json()["results"]]
        for entry in (("job.created", "ota"), ("job.updated", "ota")):
            assert entry in audit, audit  # who made and cancelled it
        assert ("devicegroup.created", "kitchen") in audit

        # With force, an IN_PROGRESS execution is cancelled too, and its device told.
        forced = {"job_id": "ota-2", "document": {"v": 2}, "targets": {"devices": ["a"]}}
        assert api.post("/api/v1/jobs", forced, format="json").status_code == 201
        assert len(a.get(2)) == 2  # notify, notify-next
        send(a, "$aws/things/a/jobs/start-next", {})
        assert len(a.get(2)) == 2  # accepted, notify
        cancel = api.post("/api/v1/jobs/ota-2/cancel", {"force": True}, format="json")
        assert cancel.json()["executions"][0]["status"] == "CANCELED"
        assert "execution" not in by_topic(a, 2)["$aws/things/a/jobs/notify-next"]
        send(a, "$aws/things/a/jobs/ota-2/update", {"status": "SUCCEEDED"})
        assert by_topic(a, 1)["$aws/things/a/jobs/ota-2/update/rejected"]["code"] == (
            "TerminalStateReached"
        )
        completed = api.post("/api/v1/jobs/ota/cancel", {}, format="json")
        assert completed.status_code == 200  # cancelled already: nothing changes

        # AWS's refusals of malformed requests, with their codes.
        send(a, "$aws/things/a/jobs/ota/update", {"status": "DONE"})
        assert by_topic(a, 1)["$aws/things/a/jobs/ota/update/rejected"]["code"] == "InvalidRequest"
        a.paho.client.publish("$aws/things/a/jobs/get", b"{nope", 1).wait_for_publish(5)
        assert by_topic(a, 1)["$aws/things/a/jobs/get/rejected"]["code"] == "InvalidJson"
        send(a, "$aws/things/a/jobs/ota/delete", {"clientToken": "t-3"})
        unmapped = by_topic(a, 1)["$aws/things/a/jobs/ota/delete/rejected"]
        assert (unmapped["code"], unmapped["clientToken"]) == ("InvalidTopic", "t-3")
        a_acks = acks_of(a)
        forged = send(a, "$aws/things/a/jobs/get/accepted", {"queuedJobs": []}, a_acks)
        assert forged == NOT_AUTHORIZED  # replies are the service's alone
    finally:
        a.close()
        c.close()


def test_attackers_cannot_reach_another_tenants_or_things_jobs(jobs_broker, fleet):
    for name in ("a", "b"):
        fleet.device(name)
    owner = api_client(fleet.tenant)
    owner.post("/api/v1/groups", {"name": "kitchen", "devices": ["a"]}, format="json")
    body = {"job_id": "ota", "document": {"v": 2}, "targets": {"devices": ["a"]}}
    assert owner.post("/api/v1/jobs", body, format="json").status_code == 201

    evil = Fleet(tenant_services.tenant_create(f"ev{fleet.slug[2:]}"), fleet.folder, None, None)
    _, evil.secrets["a"] = device_services.device_create(tenant=evil.tenant, name="a")
    attacker = api_client(evil.tenant)
    # Another tenant's job ids and group names are not there; its device names are unknown.
    assert attacker.get("/api/v1/jobs/ota").status_code == 404
    assert attacker.post("/api/v1/jobs/ota/cancel", {}, format="json").status_code == 404
    assert attacker.get("/api/v1/jobs").json()["results"] == []
    assert attacker.get("/api/v1/groups/kitchen").status_code == 404
    aimed = {"job_id": "steal", "document": {}, "targets": {"devices": ["b"]}}
    refused = attacker.post("/api/v1/jobs", aimed, format="json")
    assert refused.status_code == 400 and "Unknown devices: b" in refused.json()["error"]["message"]
    aimed["targets"] = {"groups": ["kitchen"]}
    assert attacker.post("/api/v1/jobs", aimed, format="json").status_code == 400
    assert owner.get("/api/v1/jobs/ota").json()["status"] == "IN_PROGRESS"  # untouched

    twin = Watcher(jobs_broker.port, evil, "a", subscribe="$aws/things/a/jobs/#")
    b = Watcher(jobs_broker.port, fleet, "b", subscribe="$aws/things/b/jobs/#")
    b_acks = acks_of(b)
    try:
        # A thing of the same name in another tenant sees none of these jobs.
        send(twin, "$aws/things/a/jobs/get", {})
        assert by_topic(twin, 1)["$aws/things/a/jobs/get/accepted"]["queuedJobs"] == []
        send(twin, "$aws/things/a/jobs/ota/get", {})
        missing = by_topic(twin, 1)["$aws/things/a/jobs/ota/get/rejected"]
        assert missing["code"] == "ResourceNotFound"
        send(twin, "$aws/things/a/jobs/ota/update", {"status": "SUCCEEDED"})
        assert "$aws/things/a/jobs/ota/update/rejected" in by_topic(twin, 1)

        # A device of the same tenant reaching for a's jobs: refused at the door.
        for topic, request in (
            ("$aws/things/a/jobs/get", {}),
            ("$aws/things/a/jobs/ota/get", {}),
            ("$aws/things/a/jobs/start-next", {}),
            ("$aws/things/a/jobs/ota/update", {"status": "FAILED"}),
            ("$aws/things/b/jobs/notify-next", {"execution": {"jobId": "forged"}}),
            ("$aws/things/a/jobs/notify-next", {"execution": {"jobId": "forged"}}),
        ):
            assert send(b, topic, request, b_acks) == NOT_AUTHORIZED, topic
        for topic_filter in ("$aws/things/a/jobs/notify-next", "$aws/things/+/jobs/#"):
            assert b.paho.subscribe(topic_filter, 1)[0].value == NOT_AUTHORIZED
        assert b.paho.nothing(0.3)
        executions = owner.get("/api/v1/jobs/ota").json()["executions"]
        assert [(e["device"], e["status"], e["version_number"]) for e in executions] == [
            ("a", "QUEUED", 1)
        ]
    finally:
        twin.close()
        b.close()


def test_rollout_rate_and_abort_criteria(jobs_broker, fleet):
    names = [f"d{i}" for i in range(1, 6)]
    for name in names:
        fleet.device(name)
    api = api_client(fleet.tenant)
    body = {
        "job_id": "wave",
        "document": {"v": 3},
        "targets": {"devices": names},
        "rollout": {"maximum_per_minute": 2},
        "abort": {"criteria": [{"failure_type": "FAILED", "threshold_percentage": 50}]},
    }
    bad = api.post("/api/v1/jobs", {**body, "rollout": {"maximum_per_minute": 0}}, format="json")
    assert bad.status_code == 400 and "maximum_per_minute" in bad.json()["error"]["message"]
    d1 = Watcher(jobs_broker.port, fleet, "d1", subscribe="$aws/things/d1/jobs/#")
    d3 = Watcher(jobs_broker.port, fleet, "d3", subscribe="$aws/things/d3/jobs/notify-next")
    try:
        job = api.post("/api/v1/jobs", body, format="json").json()
        assert [e["device"] for e in job["executions"]] == ["d1", "d2"]
        assert job["not_yet_released"] == 3 and job["rollout"] == {"maximum_per_minute": 2}
        assert len(d1.get(2)) == 2 and d3.paho.nothing(0.3)  # d3 is not told yet

        now = timezone.now()
        assert job_services.jobs_roll_out(now) == 0  # not a minute since the last release
        assert job_services.jobs_roll_out(now + timedelta(seconds=61)) == 2
        assert by_topic(d3, 1)["$aws/things/d3/jobs/notify-next"]["execution"]["jobId"] == "wave"
        job = api.get("/api/v1/jobs/wave").json()
        assert [e["device"] for e in job["executions"]] == ["d1", "d2", "d3", "d4"]

        # One of one executed device failed: 100 % ≥ 50 %, the job is aborted.
        assert job_services.jobs_abort() == []
        send(d1, "$aws/things/d1/jobs/wave/update", {"status": "FAILED"})
        assert "$aws/things/d1/jobs/wave/update/accepted" in by_topic(d1, 3)
        assert job_services.jobs_abort() == ["wave"]
        job = api.get("/api/v1/jobs/wave").json()
        assert job["status"] == "CANCELED" and job["reason"].startswith("aborted: 1 of 1")
        assert job["not_yet_released"] == 0
        assert {e["device"]: e["status"] for e in job["executions"]} == {
            "d1": "FAILED",
            "d2": "CANCELED",
            "d3": "CANCELED",
            "d4": "CANCELED",
        }
        assert "execution" not in by_topic(d3, 1)["$aws/things/d3/jobs/notify-next"]
        assert job_services.jobs_roll_out(now + timedelta(minutes=5)) == 0  # d5 never gets it
    finally:
        d1.close()
        d3.close()
