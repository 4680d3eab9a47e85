"""The portal's forms for jobs, device groups and fleet provisioning, through Django's test client
against real Postgres: each writes through the service the REST API calls (what one door makes,
the other shows), a bad value is refused next to its field in the API's words, and from the
attacker's side another tenant's job, group, template and claim are 404s by URL while a viewer's
POSTs are 403s and change nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from tenants.accounts import services as account_services
from tenants.devices import identity
from tenants.devices import services as device_services
from tenants.fleet import services as fleet
from tenants.jobs import services as job_services
from tenants.models import (
    CaCertificate,
    DeviceGroup,
    FleetCertificate,
    Job,
    Membership,
    ProvisioningTemplate,
)

pytestmark = pytest.mark.django_db

PASSWORD = "a long passphrase"


@pytest.fixture
def acme(client):
    tenant, user, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    for name in ("lamp", "pump", "fan"):
        device_services.device_create(tenant=tenant, name=name)
    client.force_login(user)
    return tenant


def _api(tenant) -> APIClient:
    api = APIClient()
    owner = Membership.objects.filter(tenant=tenant).first().user
    _, token = account_services.api_token_create(user=owner, tenant=tenant)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


JOB = {
    "job_id": "fw-2",
    "description": "",
    "document": '{"operation": "update", "version": "2.0"}',
    "devices": ["lamp"],
    "groups": [],
    "rollout_per_minute": "",
    "abort_failure_type": "",
    "abort_threshold": "",
    "abort_min_executed": "1",
    "timeout_minutes": "",
}


def _errors(response) -> dict[str, list[str]]:
    form = response.context["form"]
    return {field: [str(e) for e in errors] for field, errors in form.errors.items()}


def test_a_job_made_in_the_portal_is_the_apis_job(client, acme):
    job_services.group_create(tenant=acme, name="kitchen", devices=["pump", "fan"])
    page = client.get("/jobs/")
    assert b'id="job-create"' in page.content and b"kitchen" in page.content
    form = {
        **JOB,
        "groups": ["kitchen"],
        "rollout_per_minute": "2",
        "abort_failure_type": "FAILED",
        "abort_threshold": "25",
        "abort_min_executed": "4",
        "timeout_minutes": "30",
    }
    made = client.post("/jobs/", form)
    assert made.status_code == 302 and made["Location"] == "/jobs/fw-2/"
    progress = client.get("/jobs/fw-2/")
    assert b"Job fw-2 created." in progress.content
    assert b'href="/groups/kitchen/"' in progress.content  # the target group links to it

    job = _api(acme).get("/api/v1/jobs/fw-2").json()
    assert job["document"] == {"operation": "update", "version": "2.0"}
    assert job["targets"] == {"devices": ["lamp"], "groups": ["kitchen"]}
    assert job["rollout"] == {"maximum_per_minute": 2} and job["not_yet_released"] == 1
    assert job["abort"] == {
        "criteria": [
            {"failure_type": "FAILED", "threshold_percentage": 25.0, "min_executed_things": 4}
        ]
    }
    assert job["timeout_minutes"] == 30
    assert Job.objects.get(job_id="fw-2").created_by == "me@acme.io"


def test_the_groups_of_new_devices_set_in_the_portal_are_the_apis(client, acme):
    for name in ("kitchen", "attic"):
        job_services.group_create(tenant=acme, name=name)
    form = client.get("/provisioning/")
    assert b'value="kitchen"' in form.content  # the tenant's groups to pick from
    made = client.post("/provisioning/", {**TEMPLATE, "groups": ["kitchen"]})
    assert made.status_code == 302, _errors(made)
    api = _api(acme)
    assert api.get("/api/v1/provisioning-templates/sensors").json()["groups"] == ["kitchen"]
    page = client.get("/provisioning/sensors/")
    assert b'id="template-groups"' in page.content and b"kitchen" in page.content

    changed = client.post("/provisioning/sensors/groups/", {"groups": ["attic", "kitchen"]})
    assert changed.status_code == 302
    assert api.get("/api/v1/provisioning-templates/sensors").json()["groups"] == [
        "attic",
        "kitchen",
    ]
    unknown = client.post("/provisioning/sensors/groups/", {"groups": ["attic", "cellar"]})
    assert unknown.context["groups_form"].errors == {"groups": ["Unknown groups: cellar."]}
    cleared = client.post("/provisioning/sensors/groups/", {})  # none picked: none joined
    assert cleared.status_code == 302
    assert api.get("/api/v1/provisioning-templates/sensors").json()["groups"] == []


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"document": '{"version": 2,}'}, "document", "Not valid JSON"),
        ({"document": "[1, 2]"}, "document", "must be a JSON object"),
        ({"document": "null"}, "document", "must be a JSON object"),
        ({"document": "  "}, "document", "required"),
        ({"document": json.dumps({"x": "y" * 33_000})}, "document", "32768 bytes"),
        ({"job_id": "fw 2"}, "job_id", "letters, digits"),
        ({"devices": ["ghost"]}, "devices", "Unknown devices: ghost"),
        ({"devices": [], "groups": ["attic"]}, "groups", "Unknown groups: attic"),
        ({"devices": []}, "devices", "at least one device"),
        ({"timeout_minutes": "0"}, "timeout_minutes", "1 to 10080"),
        ({"rollout_per_minute": "5000"}, "rollout_per_minute", "from 1 to 1000"),
        ({"abort_failure_type": "FAILED", "abort_threshold": "150"}, "abort_threshold", "100"),
        ({"abort_threshold": "10"}, "abort_threshold", "failure_type"),
    ],
)
def test_a_bad_job_is_refused_next_to_its_field_in_the_apis_words(
    client, acme, change, field, words
):
    refused = client.post("/jobs/", {**JOB, **change})
    assert refused.status_code == 200
    errors = _errors(refused)
    assert list(errors) == [field] and words in " ".join(errors[field]), errors
    assert b'class="error"' in refused.content and b'aria-invalid="true"' in refused.content
    assert not Job.objects.exists()


def test_a_job_id_taken_is_refused_and_the_form_keeps_what_was_typed(client, acme):
    assert client.post("/jobs/", JOB).status_code == 302
    again = client.post("/jobs/", {**JOB, "description": "second try"})
    assert _errors(again) == {"job_id": ["A job 'fw-2' already exists."]}
    assert b"second try" in again.content and Job.objects.count() == 1


def test_groups_are_made_filled_emptied_and_deleted_as_the_api_sees_them(client, acme):
    made = client.post("/groups/", {"name": "kitchen", "devices": ["lamp"]})
    assert made.status_code == 302 and made["Location"] == "/groups/kitchen/"
    listed = client.get("/groups/")
    assert b'href="/groups/kitchen/"' in listed.content
    page = client.get("/groups/kitchen/")
    # The add form offers the devices not yet in the group.
    assert page.context["form"].fields["devices"].choices == [("fan", "fan"), ("pump", "pump")]
    client.post("/groups/kitchen/add/", {"devices": ["pump", "fan"]})
    api = _api(acme)
    assert api.get("/api/v1/groups/kitchen").json()["devices"] == ["fan", "lamp", "pump"]
    client.post("/groups/kitchen/remove/", {"devices": ["lamp"]})
    assert api.get("/api/v1/groups/kitchen").json()["devices"] == ["fan", "pump"]

    taken = client.post("/groups/", {"name": "kitchen"})
    assert _errors(taken) == {"name": ["A group 'kitchen' already exists."]}
    bad = client.post("/groups/", {"name": "a b"})
    assert "name" in _errors(bad)
    ghost = client.post("/groups/kitchen/add/", {"devices": ["ghost"]})
    assert _errors(ghost) == {"devices": ["Unknown devices: ghost."]}

    client.post("/groups/kitchen/delete/")
    assert api.get("/api/v1/groups/kitchen").status_code == 404
    assert acme.devices.count() == 3  # its devices stay


def test_the_api_deletes_a_group_too(acme):
    job_services.group_create(tenant=acme, name="kitchen", devices=["lamp"])
    api = _api(acme)
    assert api.delete("/api/v1/groups/kitchen").status_code == 204
    assert api.delete("/api/v1/groups/kitchen").status_code == 404


TEMPLATE = {
    "name": "sensors",
    "device_name_template": "sensor-{SerialNumber}",
    "acl_rules": '[{"action": "both", "permission": "allow", "topic": "sensors/${client}/#"}]',
    "attributes": '{"model": "t1"}',
    "pre_provisioning_hook_url": "https://hooks.example.com/allow",
    "enabled": "on",
}


def test_a_template_and_its_claim_made_in_the_portal_are_the_apis(client, acme):
    made = client.post("/provisioning/", TEMPLATE)
    assert made.status_code == 302 and made["Location"] == "/provisioning/sensors/"
    api = _api(acme)
    template = api.get("/api/v1/provisioning-templates/sensors").json()
    assert template["parameters"] == ["SerialNumber"]
    assert template["acl_rules"] == [
        {"action": "both", "permission": "allow", "topic": "sensors/${client}/#"}
    ]
    assert template["attributes"] == {"model": "t1"}
    assert template["pre_provisioning_hook_url"] == "https://hooks.example.com/allow"

    issued = client.post("/provisioning/sensors/claims/")
    assert issued.status_code == 302
    once = client.get("/provisioning/sensors/")
    key = once.context["issued"]["private_key"]
    assert "PRIVATE KEY" in key and key.encode() in once.content
    certificate_id = once.context["issued"]["certificate_id"]
    assert b"claim-key-download" in once.content
    again = client.get("/provisioning/sensors/")  # shown once: never again
    assert key.encode() not in again.content and certificate_id.encode() in again.content
    claims = api.get("/api/v1/provisioning-templates/sensors/claims").json()["results"]
    assert [c["certificate_id"] for c in claims] == [certificate_id]

    client.post(f"/provisioning/sensors/claims/{certificate_id}/revoke/")
    assert FleetCertificate.objects.get(certificate_id=certificate_id).revoked_at is not None
    client.post("/provisioning/sensors/delete/")
    assert api.get("/api/v1/provisioning-templates/sensors").status_code == 404


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"device_name_template": "sensor"}, "device_name_template", "Name at least one"),
        ({"acl_rules": "[{]"}, "acl_rules", "Not valid JSON"),
        ({"acl_rules": '{"action": "both"}'}, "acl_rules", "A list of rules"),
        ({"acl_rules": '[{"action": "fly"}]'}, "acl_rules", "Rule 0"),
        ({"attributes": "[1]"}, "attributes", "An object"),
        ({"pre_provisioning_hook_url": "not a url at all"}, "pre_provisioning_hook_url", "URL"),
        ({"name": "a/b"}, "name", ""),
    ],
)
def test_a_bad_template_is_refused_next_to_its_field(client, acme, change, field, words):
    refused = client.post("/provisioning/", {**TEMPLATE, **change})
    errors = _errors(refused)
    assert list(errors) == [field] and words in " ".join(errors[field]), errors
    assert not ProvisioningTemplate.objects.exists()


def test_the_api_refuses_what_the_portal_refuses(acme):
    """The shape checks moved into the service: the API's answer is still a 400, not a 500."""
    api = _api(acme)
    for body in ({"acl_rules": {"action": "both"}}, {"attributes": [1]}):
        answer = api.post(
            "/api/v1/provisioning-templates",
            {"name": "s", "device_name_template": "s-{N}", **body},
            format="json",
        )
        assert answer.status_code == 400, answer.content


def test_just_in_time_registration_is_turned_on_and_off_per_ca(client, acme):
    ca = CaCertificate.objects.create(
        tenant=acme,
        name="factory",
        pem="-",
        fingerprint="f" * 64,
        subject="CN=factory",
        not_after=timezone.now() + timedelta(days=30),
    )
    page = client.get("/identity/")
    assert b"turn on" in page.content
    client.post("/identity/cas/factory/auto-registration/", {"enabled": "on"})
    ca.refresh_from_db()
    assert ca.auto_registration is True
    assert _api(acme).get("/api/v1/cas/factory").json()["auto_registration"] is True
    client.post("/identity/cas/factory/auto-registration/")
    ca.refresh_from_db()
    assert ca.auto_registration is False


# -- the attacker's side ----------------------------------------------------------------------


@pytest.fixture
def victim():
    """Tenant A's job, group, template and claim; the client is logged in as tenant B."""
    tenant, _, _ = account_services.signup(tenant="victim", email="a@victim.io", password=PASSWORD)
    device_services.device_create(tenant=tenant, name="their-lamp")
    job_services.group_create(tenant=tenant, name="their-group", devices=["their-lamp"])
    job_services.job_create(
        tenant=tenant, job_id="their-job", document={"v": 1}, targets={"devices": ["their-lamp"]}
    )
    template = fleet.template_create(
        tenant=tenant, name="their-template", device_name_template="s-{N}"
    )
    claim = fleet.claim_create(template).certificate
    ca = identity.ca_get(tenant=tenant, name=fleet.AUTHORITY_CA_NAME)
    return tenant, claim.certificate_id, ca


def test_another_tenants_objects_are_404s_by_url(client, acme, victim):
    tenant, certificate_id, ca = victim
    # The same pages of our own objects are there (a 404 below is the tenant's wall, not a
    # page that does not exist).
    job_services.group_create(tenant=acme, name="our-group")
    job_services.job_create(
        tenant=acme, job_id="our-job", document={}, targets={"devices": ["lamp"]}
    )
    fleet.template_create(tenant=acme, name="our-template", device_name_template="s-{N}")
    for url in ("/jobs/our-job/", "/groups/our-group/", "/provisioning/our-template/"):
        assert client.get(url).status_code == 200, url
    template = "/provisioning/their-template"
    for url in (
        "/jobs/their-job/",
        "/groups/their-group/",
        f"{template}/",
        "/groups/%00/",
        "/provisioning/%00/",
    ):
        assert client.get(url).status_code == 404, url
    for url, data in (
        ("/jobs/their-job/cancel/", {"force": "on"}),
        ("/groups/their-group/add/", {"devices": ["lamp"]}),
        ("/groups/their-group/remove/", {"devices": ["their-lamp"]}),
        ("/groups/their-group/delete/", {}),
        (f"{template}/claims/", {}),
        (f"{template}/claims/{certificate_id}/revoke/", {}),
        (f"{template}/delete/", {}),
        (f"{template}/groups/", {"groups": ["our-group"]}),
        (f"/identity/cas/{ca.name}/auto-registration/", {"enabled": "on"}),
    ):
        assert client.post(url, data).status_code == 404, url
    # Naming their group or device in our own forms: unknown here, as in the API.
    job = client.post("/jobs/", {**JOB, "devices": ["their-lamp"], "groups": ["their-group"]})
    assert _errors(job) == {"devices": ["Unknown devices: their-lamp."]}
    group = client.post("/groups/", {"name": "mine", "devices": ["their-lamp"]})
    assert _errors(group) == {"devices": ["Unknown devices: their-lamp."]}
    made = client.post("/provisioning/", {**TEMPLATE, "groups": ["their-group"]})
    assert _errors(made) == {"groups": ["Unknown groups: their-group."]}
    ours = client.post("/provisioning/our-template/groups/", {"groups": ["their-group"]})
    assert ours.context["groups_form"].errors == {"groups": ["Unknown groups: their-group."]}
    assert not fleet.template_get(tenant=acme, name="our-template").groups.exists()

    assert Job.objects.get(job_id="their-job").status == "IN_PROGRESS"
    assert list(DeviceGroup.objects.get(name="their-group").devices.values_list("name", flat=True))
    assert ProvisioningTemplate.objects.filter(tenant=tenant).count() == 1
    assert FleetCertificate.objects.get(certificate_id=certificate_id).revoked_at is None
    ca.refresh_from_db()
    assert ca.auto_registration is False
    assert list(Job.objects.filter(tenant=acme).values_list("job_id", flat=True)) == ["our-job"]


def test_a_viewer_sees_no_form_and_cannot_post_one(client, acme):
    job_services.group_create(tenant=acme, name="kitchen", devices=["lamp"])
    template = fleet.template_create(tenant=acme, name="sensors", device_name_template="s-{N}")
    certificate_id = fleet.claim_create(template).certificate.certificate_id
    CaCertificate.objects.create(
        tenant=acme,
        name="factory",
        pem="-",
        fingerprint="f" * 64,
        subject="CN=factory",
        not_after=timezone.now() + timedelta(days=30),
    )
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", PASSWORD)
    Membership.objects.create(user=viewer, tenant=acme, role="viewer")
    client.force_login(viewer)

    for url, hidden in (
        ("/jobs/", b'id="job-create"'),
        ("/groups/", b'id="group-create"'),
        ("/groups/kitchen/", b'id="group-add"'),
        ("/provisioning/", b'id="template-create"'),
        ("/provisioning/sensors/", b'id="claim-create"'),
        ("/identity/", b"auto-registration/"),
    ):
        page = client.get(url)
        assert page.status_code == 200 and hidden not in page.content, url
    for url, data in (
        ("/jobs/", JOB),
        ("/groups/", {"name": "attic"}),
        ("/groups/kitchen/add/", {"devices": ["pump"]}),
        ("/groups/kitchen/remove/", {"devices": ["lamp"]}),
        ("/groups/kitchen/delete/", {}),
        ("/provisioning/", TEMPLATE),
        ("/provisioning/sensors/claims/", {}),
        (f"/provisioning/sensors/claims/{certificate_id}/revoke/", {}),
        ("/provisioning/sensors/delete/", {}),
        ("/provisioning/sensors/groups/", {"groups": ["kitchen"]}),
        ("/identity/cas/factory/auto-registration/", {"enabled": "on"}),
    ):
        assert client.post(url, data).status_code == 403, url
    assert not Job.objects.exists()
    assert list(DeviceGroup.objects.values_list("name", flat=True)) == ["kitchen"]
    assert DeviceGroup.objects.get(name="kitchen").devices.count() == 1
    assert list(ProvisioningTemplate.objects.values_list("name", flat=True)) == ["sensors"]
    assert not template.groups.exists()
    assert FleetCertificate.objects.get(certificate_id=certificate_id).revoked_at is None
    assert FleetCertificate.objects.count() == 1
    assert CaCertificate.objects.get(name="factory").auto_registration is False
