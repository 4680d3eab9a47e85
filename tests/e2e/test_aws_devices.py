"""AWS IoT Core's users on the running platform: AWS's own device SDK (`awsiotsdk` over `awscrt`)
connects over mutual TLS to the TLS port `make run` opens, trusting the development CA it made,
with device certificates of a CA the tenant registered through the REST API, as a fleet moving
from AWS does. The shadow flow (the device reports, the application sets desired through the
API, the device gets the delta), the jobs flow (a job made through the API is taken and
finished by the device) and fleet provisioning by claim (a claim certificate from the API gets
a factory device its own certificate and name, with which it reconnects and publishes). The SDK
clients are those of the SDK tests against a lone broker (tests/shadows, tests/jobs, tests/fleet);
here every other part is the platform's own processes."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from awsiot import iotidentity
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.e2e.conftest import Api, Platform
from tests.fleet.test_aws_sdk import Sdk, reconnect_as_device
from tests.jobs.test_aws_sdk import SdkJobsDevice
from tests.shadows.test_aws_sdk import SdkDevice

pytestmark = pytest.mark.e2e
WAIT = 10


@dataclass
class Endpoint:
    """Where the SDK connects, as the SDK helpers want it: the TLS port and the CA it trusts."""

    tls_port: int
    server_ca: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    common_name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A CA (no issuer) or a certificate it signs, as `openssl` would make them for a fleet."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(issuer[0].subject if issuer else _name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256()), key


def _pem(value: x509.Certificate | ec.EllipticCurvePrivateKey) -> str:
    if isinstance(value, x509.Certificate):
        return value.public_bytes(serialization.Encoding.PEM).decode()
    return value.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@dataclass
class AwsTenant:
    """A tenant of its own (its journey and devices apart from the other e2e tests'), its CA
    registered through the API, and where its devices connect."""

    api: Api
    slug: str
    endpoint: Endpoint
    folder: Path
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey]

    def device(self, name: str) -> tuple[str, str]:
        """A device made through the API with a certificate of the tenant's CA registered for
        it: (certificate path, key path) for the SDK."""
        made = self.api.post("/api/v1/devices", {"name": name})
        assert made.status_code == 201, made.text
        cert, key = _certificate(name, self.ca)
        registered = self.api.post(f"/api/v1/devices/{name}/certificates", {"pem": _pem(cert)})
        assert registered.status_code == 201, registered.text
        return self.write(name, _pem(cert), _pem(key))

    def write(self, stem: str, cert: str, key: str) -> tuple[str, str]:
        cert_path, key_path = self.folder / f"{stem}.pem", self.folder / f"{stem}.key"
        cert_path.write_text(cert)
        key_path.write_text(key)
        key_path.chmod(0o600)
        return str(cert_path), str(key_path)


def _development_ca(platform: Platform) -> str:
    """The CA `make run` made for its TLS port, as the banner names it (the line right after the
    banner proper, so it may come a moment after)."""
    deadline = time.monotonic() + 30
    while not (found := re.search(r"development CA +(\S+)", platform.output())):
        assert time.monotonic() < deadline, platform.output()[-3000:]
        time.sleep(0.3)
    return found.group(1)


@pytest.fixture(scope="module")
def aws(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> AwsTenant:
    signup = platform.api().post(
        "/api/v1/signup",
        {"tenant": "e2e-aws", "email": "owner@e2e-aws.io", "password": "an aws e2e passphrase"},
    )
    assert signup.status_code == 201, signup.text
    api = platform.api(signup.json()["token"])
    # Registering the fleet's CA as AWS's register-ca-certificate: a verification certificate
    # signed with the tenant's registration code proves the CA's key is the tenant's.
    code = api.get("/api/v1/cas/registration-code")
    assert code.status_code == 200, code.text
    ca = _certificate("e2e-aws fleet CA")
    verification, _ = _certificate(code.json()["registration_code"], ca)
    registered = api.post(
        "/api/v1/cas", {"name": "fleet", "pem": _pem(ca[0]), "verification_pem": _pem(verification)}
    )
    assert registered.status_code == 201, registered.text
    endpoint = Endpoint(platform.port("MQTT_TLS_PORT"), _development_ca(platform))
    folder = tmp_path_factory.mktemp("aws-devices")
    return AwsTenant(api, signup.json()["tenant"]["slug"], endpoint, folder, ca)


def test_shadow_reported_by_the_sdk_and_desired_through_the_api(aws: AwsTenant):
    cert, key = aws.device("lamp")
    device = SdkDevice(aws.endpoint, cert, key, "lamp", 5)
    try:
        reported = device.update(reported={"color": "white", "power": "off"})
        assert reported.version == 1
        shown = aws.api.get("/api/v1/devices/lamp/shadow")
        assert shown.status_code == 200, shown.text
        assert shown.json()["state"]["reported"] == {"color": "white", "power": "off"}
        assert shown.headers["ETag"] == '"1"'

        # The application asks for a change through the API: the device hears the difference.
        wanted = aws.api.post(
            "/api/v1/devices/lamp/shadow", {"state": {"desired": {"power": "on"}}}
        )
        assert wanted.status_code == 200, wanted.text
        delta = device.deltas.get(timeout=WAIT)
        assert delta.state == {"power": "on"} and delta.version == 2
        synced = device.update(reported={"power": "on"})
        assert synced.version == 3
        now = aws.api.get("/api/v1/devices/lamp/shadow").json()
        assert now["state"]["reported"] == {"color": "white", "power": "on"}
        assert now["state"]["desired"] == {"power": "on"}
        assert "delta" not in now["state"] and now["version"] == 3

        # A named shadow beside it: its own document and versions.
        device.update(reported={"firmware": "1.2"}, name="ota")
        named = aws.api.get("/api/v1/devices/lamp/shadows/ota").json()
        assert named["state"]["reported"] == {"firmware": "1.2"} and named["version"] == 1
        listed = aws.api.get("/api/v1/devices/lamp/shadows").json()
        names = [s["name"] for s in (listed["results"] if isinstance(listed, dict) else listed)]
        assert names == ["ota"]
    finally:
        device.close()


def test_job_from_the_api_is_done_by_the_sdk(aws: AwsTenant):
    cert, key = aws.device("pump")
    device = SdkJobsDevice(aws.endpoint, cert, key, "pump", 3)  # MQTT 3.1.1, as older fleets
    try:
        made = aws.api.post(
            "/api/v1/jobs",
            {"job_id": "fw-2-0", "document": {"firmware": "2.0"}, "targets": {"devices": ["pump"]}},
        )
        assert made.status_code == 201, made.text
        told = device.next_event().execution
        assert (told.job_id, told.status, told.job_document) == (
            "fw-2-0",
            "QUEUED",
            {"firmware": "2.0"},
        )
        started = device.start_next().execution
        assert (started.job_id, started.status) == ("fw-2-0", "IN_PROGRESS")
        running = aws.api.get("/api/v1/jobs/fw-2-0").json()
        assert [(e["device"], e["status"]) for e in running["executions"]] == [
            ("pump", "IN_PROGRESS")
        ]
        done = device.update(
            "fw-2-0",
            "SUCCEEDED",
            status_details={"installed": "2.0"},
            include_job_execution_state=True,
        )
        assert done.execution_state.status == "SUCCEEDED"
        assert device.next_event().execution is None  # nothing left to do
        job = aws.api.get("/api/v1/jobs/fw-2-0").json()
        assert job["status"] == "COMPLETED"
        (execution,) = job["executions"]
        assert (execution["device"], execution["status"]) == ("pump", "SUCCEEDED")
        assert execution["status_details"] == {"installed": "2.0"}
    finally:
        device.close()


def test_fleet_provisioning_by_claim_with_the_sdk(aws: AwsTenant):
    template = aws.api.post(
        "/api/v1/provisioning-templates",
        {
            "name": "sensors",
            "device_name_template": "sensor-{SerialNumber}",
            "acl_rules": [
                {"action": "both", "permission": "allow", "topic": "sensors/${client}/#"}
            ],
        },
    )
    assert template.status_code == 201, template.text
    claim = aws.api.post("/api/v1/provisioning-templates/sensors/claims")
    assert claim.status_code == 201, claim.text
    claim_cert, claim_key = aws.write(
        "claim", claim.json()["certificate_pem"], claim.json()["private_key"]
    )
    serial = uuid.uuid4().hex[:8]
    factory = Sdk(aws.endpoint, claim_cert, claim_key, f"factory-{serial}", 5)
    try:
        identity = factory.identity()
        made = identity.create_keys_and_certificate(
            iotidentity.CreateKeysAndCertificateRequest()
        ).result(WAIT)
        registered = identity.register_thing(
            iotidentity.RegisterThingRequest(
                template_name="sensors",
                certificate_ownership_token=made.certificate_ownership_token,
                parameters={"SerialNumber": serial},
            )
        ).result(WAIT)
        assert registered.thing_name == f"sensor-{serial}"
    finally:
        factory.close()
    # The new device, on its own certificate, publishes and receives on its topics.
    reconnect_as_device(
        aws.endpoint, aws.folder, f"sensor-{serial}", made.certificate_pem, made.private_key, 5
    )
    devices = aws.api.get("/api/v1/devices").json()
    rows: list[dict[str, Any]] = devices["results"] if isinstance(devices, dict) else devices
    assert f"sensor-{serial}" in [d["name"] for d in rows]
    # Where its message went, as the tenant looks it up: its own subscription got it.
    deadline = time.monotonic() + 30
    while not (
        journey := aws.api.get("/api/v1/journey", params={"client": f"sensor-{serial}"}).json()
    )["results"]:
        assert time.monotonic() < deadline, journey
        time.sleep(0.5)
    (row,) = journey["results"]
    assert (row["topic"], row["outcome"], row["sessions"]) == (
        f"sensors/sensor-{serial}/temperature",
        "delivered",
        1,
    )
