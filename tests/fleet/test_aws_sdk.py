"""The acceptance test of issue 32's fleet provisioning: AWS's own device SDK (`awsiotsdk`'s
identity client over `awscrt`'s MQTT 5 and 3.1.1 clients) connects with the claim certificate,
creates keys and a certificate (or has its own CSR signed), registers the thing with the template,
and reconnects with its new certificate as the new device, which publishes and receives on its
own topics."""

from __future__ import annotations

import queue
import uuid
from concurrent.futures import Future
from pathlib import Path

import pytest
from awscrt import mqtt, mqtt5, mqtt_request_response
from awsiot import iotidentity, mqtt5_client_builder, mqtt_connection_builder
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from common.security.device_credentials import pem_of
from tenants.fleet import services as fleet
from tenants.jobs import services as job_services
from tenants.models import Device

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 10


class Sdk:
    """One SDK connection (MQTT 5 or 3.1.1) with mTLS, messages it receives in `received`."""

    def __init__(self, broker, cert: str, key: str, client_id: str, version: int) -> None:
        self.version = version
        self.received: queue.Queue = queue.Queue()
        common = dict(
            endpoint="localhost",
            port=broker.tls_port,
            cert_filepath=cert,
            pri_key_filepath=key,
            ca_filepath=broker.server_ca,
            client_id=client_id,
            clean_session=True,
        )
        if version == 5:
            connected: Future = Future()
            self.stopped: Future = Future()

            def failure(event) -> None:
                if not connected.done():
                    connected.set_exception(RuntimeError(f"connect failed: {event.exception}"))

            self.client = mqtt5_client_builder.mtls_from_path(
                on_lifecycle_connection_success=lambda e: connected.set_result(True),
                on_lifecycle_connection_failure=failure,
                on_lifecycle_stopped=lambda e: self.stopped.set_result(True),
                on_publish_received=lambda d: self.received.put(
                    (d.publish_packet.topic, d.publish_packet.payload)
                ),
                **common,
            )
            self.client.start()
            connected.result(WAIT)
        else:
            self.client = mqtt_connection_builder.mtls_from_path(keep_alive_secs=30, **common)
            self.client.on_message(lambda topic, payload, **kw: self.received.put((topic, payload)))
            self.client.connect().result(WAIT)

    def identity(self) -> iotidentity.IotIdentityClientV2:
        options = mqtt_request_response.ClientOptions(
            max_request_response_subscriptions=4,
            max_streaming_subscriptions=2,
            operation_timeout_in_seconds=WAIT,
        )
        return iotidentity.IotIdentityClientV2(self.client, options)

    def subscribe(self, topic: str) -> int:
        """The SUBACK's reason code (0 or 1: granted)."""
        if self.version == 5:
            packet = mqtt5.SubscribePacket([mqtt5.Subscription(topic, mqtt5.QoS.AT_LEAST_ONCE)])
            return int(self.client.subscribe(packet).result(WAIT).reason_codes[0])
        future, _ = self.client.subscribe(topic, mqtt.QoS.AT_LEAST_ONCE)
        return int(future.result(WAIT)["qos"])

    def publish(self, topic: str, payload: bytes) -> None:
        if self.version == 5:
            packet = mqtt5.PublishPacket(topic=topic, payload=payload, qos=mqtt5.QoS.AT_LEAST_ONCE)
            self.client.publish(packet).result(WAIT)
        else:
            future, _ = self.client.publish(topic, payload, mqtt.QoS.AT_LEAST_ONCE)
            future.result(WAIT)

    def close(self) -> None:
        if self.version == 5:
            self.client.stop()
            self.stopped.result(WAIT)
        else:
            self.client.disconnect().result(WAIT)


def register(identity, claim, token: str, serial: str) -> iotidentity.RegisterThingResponse:
    request = iotidentity.RegisterThingRequest(
        template_name=claim.template.name,
        certificate_ownership_token=token,
        parameters={"SerialNumber": serial},
    )
    return identity.register_thing(request).result(WAIT)


def reconnect_as_device(tls_broker, folder: Path, thing: str, pem: str, key: str, version: int):
    """The new device, on its own certificate: it publishes and receives on its topics."""
    cert_path, key_path = folder / f"{thing}.pem", folder / f"{thing}.key"
    cert_path.write_text(pem)
    key_path.write_text(key)
    device = Sdk(tls_broker, str(cert_path), str(key_path), thing, version)
    try:
        assert device.subscribe(f"sensors/{thing}/#") in (0, 1)
        device.publish(f"sensors/{thing}/temperature", b"21.5")
        assert device.received.get(timeout=WAIT) == (f"sensors/{thing}/temperature", b"21.5")
    finally:
        device.close()


@pytest.mark.parametrize("version", [5, 3], ids=["mqtt5", "mqtt311"])
def test_sdk_provisions_by_claim_and_reconnects_as_the_new_device(
    tls_broker, claim, tmp_path, version
):
    # The template puts new devices in two of the tenant's groups (AWS's template thing groups).
    for group in ("line-3", "firmware-beta"):
        job_services.group_create(tenant=claim.tenant, name=group)
    fleet.template_update(claim.template, groups=["line-3", "firmware-beta"])
    serial = uuid.uuid4().hex[:8]
    device = Sdk(tls_broker, claim.cert, claim.key, f"factory-{serial}", version)
    try:
        identity = device.identity()
        made = identity.create_keys_and_certificate(
            iotidentity.CreateKeysAndCertificateRequest()
        ).result(WAIT)
        assert made.certificate_id and made.certificate_ownership_token
        assert "PRIVATE KEY" in made.private_key and "CERTIFICATE" in made.certificate_pem
        registered = register(identity, claim, made.certificate_ownership_token, serial)
        assert registered.thing_name == f"sensor-{serial}"
        # The token is spent: a second registration with it is refused.
        with pytest.raises(Exception) as again:
            register(identity, claim, made.certificate_ownership_token, serial + "x")
        assert "InvalidCertificateOwnershipToken" in str(again.value.modeled_error.error_code)
    finally:
        device.close()
    made_device = Device.objects.get(tenant=claim.tenant, name=f"sensor-{serial}")
    assert set(made_device.groups.values_list("name", flat=True)) == {"line-3", "firmware-beta"}
    reconnect_as_device(
        tls_broker, tmp_path, f"sensor-{serial}", made.certificate_pem, made.private_key, version
    )


def test_sdk_provisions_from_its_own_csr(tls_broker, claim, tmp_path):
    serial = uuid.uuid4().hex[:8]
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "my device")]))
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
        .decode()
    )
    device = Sdk(tls_broker, claim.cert, claim.key, f"factory-{serial}", 5)
    try:
        identity = device.identity()
        made = identity.create_certificate_from_csr(
            iotidentity.CreateCertificateFromCsrRequest(certificate_signing_request=csr)
        ).result(WAIT)
        issued = x509.load_pem_x509_certificate(made.certificate_pem.encode())
        assert issued.public_key().public_numbers() == key.public_key().public_numbers()
        registered = register(identity, claim, made.certificate_ownership_token, serial)
        assert registered.thing_name == f"sensor-{serial}"
    finally:
        device.close()
    fleet.template_delete(claim.template)  # its claims go; the devices it made stay
    reconnect_as_device(
        tls_broker, tmp_path, f"sensor-{serial}", made.certificate_pem, pem_of(key), 5
    )
