"""Two CONNECTs of one client id at once on one broker, with a persistent session (saved to
Postgres before CONNACK): each client gets its CONNACK, then one of them 0x8E, and one session
remains. Taken over before its CONNACK, the first connection was closed with a DISCONNECT and
no CONNACK, which a client counts as a failed connect and retries (paho does, in a loop)."""

import pytest

from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho, race_for_one_client_id
from tests.tenancy.test_broker_tenancy import running_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_connects_of_one_client_id_each_get_connack_then_one_is_taken_over():
    tenant = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(tenant=tenant, name="d1", client_id_policy="any")
    with running_pg_broker() as port:
        for attempt in range(20):
            client_id = f"race-{attempt}"
            clients = [
                Paho(port, "acme/d1", secret, client_id, clean=False, expiry=300, connect=False)
                for _ in range(2)
            ]
            for client in clients:  # a refused connect must not come back by itself
                client.client._reconnect_on_failure = False
            race_for_one_client_id(clients, attempt)
            for client in clients:
                client.close()
