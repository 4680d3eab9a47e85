"""The acceptance test of issue 32: AWS's own device SDK (`awsiotsdk`, its shadow client over
`awscrt`'s MQTT 3.1.1 and MQTT 5 clients), pointed at our TLS listener with a device certificate
of a CA the tenant registered, unchanged apart from the endpoint, port and CA: it connects (its
`?SDK=Python&Version=…` user name and all), and runs the shadow flow of AWS's sample: get (404
at first), update desired, the delta arrives, report, a stale version is refused (409), delete,
and the version goes on when the shadow is made again; a named shadow beside it."""

from __future__ import annotations

import queue
import uuid
from concurrent.futures import Future

import awsiot
import pytest
from awscrt import mqtt5, mqtt_request_response
from awsiot import iotshadow, mqtt5_client_builder, mqtt_connection_builder

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 10


class SdkDevice:
    """A thing connected with the SDK (MQTT 3.1.1 or 5), its V2 shadow client, and its delta
    and documents streams opened."""

    def __init__(self, broker, cert: str, key: str, thing: str, version: int) -> None:
        self.thing, self.version = thing, version
        self.deltas: queue.Queue = queue.Queue()
        self.documents: queue.Queue = queue.Queue()
        self.client_id = None
        common = dict(
            endpoint="localhost",
            port=broker.tls_port,
            cert_filepath=cert,
            pri_key_filepath=key,
            ca_filepath=broker.server_ca,
            clean_session=True,
        )
        if version == 5:
            connected: Future = Future()
            self.stopped: Future = Future()

            def success(event: mqtt5.LifecycleConnectSuccessData) -> None:
                self.client_id = event.negotiated_settings.client_id
                connected.set_result(True)

            def failure(event: mqtt5.LifecycleConnectFailureData) -> None:
                if not connected.done():
                    connected.set_exception(RuntimeError(f"connect failed: {event.exception}"))

            # The client id AWS's policies usually demand (`${iot:Connection.Thing.ThingName}`),
            # and this platform's default for a device (the SDK would make one up otherwise).
            self.connection = mqtt5_client_builder.mtls_from_path(
                client_id=thing,
                on_lifecycle_connection_success=success,
                on_lifecycle_connection_failure=failure,
                on_lifecycle_stopped=lambda e: self.stopped.set_result(True),
                **common,
            )
            self.connection.start()
            connected.result(WAIT)
        else:
            self.connection = mqtt_connection_builder.mtls_from_path(
                client_id=thing, keep_alive_secs=30, **common
            )
            self.connection.connect().result(WAIT)
            self.client_id = thing
        options = mqtt_request_response.ClientOptions(
            max_request_response_subscriptions=4,
            max_streaming_subscriptions=4,
            operation_timeout_in_seconds=WAIT,
        )
        self.shadow = iotshadow.IotShadowClientV2(self.connection, options)
        self.streams = [
            self._stream(
                self.shadow.create_shadow_delta_updated_stream,
                iotshadow.ShadowDeltaUpdatedSubscriptionRequest(thing_name=thing),
                self.deltas,
            ),
            self._stream(
                self.shadow.create_shadow_updated_stream,
                iotshadow.ShadowUpdatedSubscriptionRequest(thing_name=thing),
                self.documents,
            ),
        ]

    @staticmethod
    def _stream(create, request, into: queue.Queue):
        ready: Future = Future()

        def status(event) -> None:
            kind = mqtt_request_response.SubscriptionStatusEventType
            if event.type == kind.SUBSCRIPTION_ESTABLISHED and not ready.done():
                ready.set_result(True)

        stream = create(request, awsiot.ServiceStreamOptions(into.put, status))
        stream.open()
        ready.result(WAIT)
        return stream

    def update(self, *, desired=None, reported=None, version=None, name: str = ""):
        state = iotshadow.ShadowState(desired=desired, reported=reported)
        if name:
            request = iotshadow.UpdateNamedShadowRequest(
                thing_name=self.thing, shadow_name=name, state=state, version=version
            )
            return self.shadow.update_named_shadow(request).result(WAIT)
        request = iotshadow.UpdateShadowRequest(thing_name=self.thing, state=state, version=version)
        return self.shadow.update_shadow(request).result(WAIT)

    def get(self, name: str = ""):
        if name:
            return self.shadow.get_named_shadow(
                iotshadow.GetNamedShadowRequest(thing_name=self.thing, shadow_name=name)
            ).result(WAIT)
        return self.shadow.get_shadow(iotshadow.GetShadowRequest(thing_name=self.thing)).result(
            WAIT
        )

    def delete(self):
        request = iotshadow.DeleteShadowRequest(thing_name=self.thing)
        return self.shadow.delete_shadow(request).result(WAIT)

    def close(self) -> None:
        self.streams.clear()
        if self.version == 5:
            self.connection.stop()
            self.stopped.result(WAIT)
        else:
            self.connection.disconnect().result(WAIT)


def refused(call) -> awsiot.iotshadow.V2ErrorResponse:
    """The service's error response a failing SDK call carried (its `…/rejected` body)."""
    with pytest.raises(awsiot.V2ServiceException) as caught:
        call()
    return caught.value.modeled_error


@pytest.mark.parametrize("version", [3, 5], ids=["mqtt311", "mqtt5"])
def test_sdk_shadow_flow(tls_broker, fleet, version):
    thing = f"lamp-{uuid.uuid4().hex[:6]}"
    cert, key = fleet.device(thing)
    device = SdkDevice(tls_broker, cert, key, thing, version)
    try:
        # Identity as the SDK sends it: its `?SDK=…` user name did not stand in the way.
        assert device.client_id == thing
        missing = refused(device.get)
        assert (missing.code, missing.message) == (404, f"No shadow exists with name: '{thing}'")

        wanted = device.update(desired={"color": "red", "power": "on"})
        assert wanted.version == 1 and wanted.state.desired == {"color": "red", "power": "on"}
        assert wanted.metadata.desired["color"]["timestamp"] > 0
        delta = device.deltas.get(timeout=WAIT)
        assert delta.state == {"color": "red", "power": "on"} and delta.version == 1
        created = device.documents.get(timeout=WAIT)
        assert created.previous is None and created.current.version == 1

        reported = device.update(reported={"color": "red", "power": "off"})
        assert reported.version == 2 and reported.state.reported == {"color": "red", "power": "off"}
        still = device.deltas.get(timeout=WAIT)  # power still differs: the delta says only that
        assert still.state == {"power": "on"} and still.version == 2
        changed = device.documents.get(timeout=WAIT)
        assert changed.previous.version == 1 and changed.current.state.reported["power"] == "off"

        stale = refused(lambda: device.update(reported={"power": "on"}, version=1))
        assert (stale.code, stale.message) == (409, "Version conflict")
        synced = device.update(reported={"power": "on"}, version=2)
        assert synced.version == 3
        with pytest.raises(queue.Empty):  # in step: no delta this time
            device.deltas.get(timeout=0.5)

        current = device.get()
        assert current.version == 3 and current.state.delta is None
        assert current.state.desired == {"color": "red", "power": "on"}
        assert current.state.reported == {"color": "red", "power": "on"}
        assert current.metadata.reported["power"]["timestamp"] >= wanted.timestamp.timestamp() - 1

        named = device.update(reported={"firmware": "1.2"}, name="ota")
        assert named.version == 1  # a named shadow has versions of its own
        assert device.get(name="ota").state.reported == {"firmware": "1.2"}

        assert device.delete().version == 3
        assert refused(device.get).code == 404
        again = device.update(reported={"color": "blue"})
        assert again.version == 4  # a deleted shadow's version goes on
        assert device.get().state.desired is None
        assert device.get(name="ota").version == 1  # deleting the classic one left it be
    finally:
        device.close()
