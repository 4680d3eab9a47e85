"""Rules saved while a broker starts are all archived (and so fed to the live rules job): the
broker's archive decisions are read at start-up and then follow the change notifications, and a
change committed around that read (before the listener listened, or before the decisions
followed it) was announced to no one. Measured before the fix: 32-39 of 200 rules saved during
a broker's start archived nothing, and their actions never ran (bench.rules_live)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from common.archive.files import read_archive
from common.stores.object_store import LocalObjectStore
from tenants.devices import services as device_services
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)
RULES = TENANTS = 60  # one rule a tenant: a later rule of the same tenant would mend a miss


def test_rules_saved_while_the_broker_starts_are_all_archived(monkeypatch, tmp_path):
    root = tmp_path / "objects"
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{root}")
    tenants, secrets = [], []
    for index in range(TENANTS):
        tenant = tenant_services.tenant_create(f"start-{index}")
        _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
        tenants.append(tenant)
        secrets.append(secret)
    connection.close()

    def save_rules() -> None:  # each its own commit, spread over the broker's start
        try:
            for i in range(RULES):
                rule_services.rule_create(
                    tenant=tenants[i % TENANTS], name=f"r{i}", sql=f'SELECT * FROM "s/{i}/#"'
                )
                time.sleep(0.05)
        finally:
            connection.close()

    saver = threading.Thread(target=save_rules)
    saver.start()
    process, port = start_pg_broker("--archive-interval", "0.2")
    try:
        saver.join(120)
        time.sleep(1.0)  # the last rules' notifications applied
        for index, secret in enumerate(secrets):
            device = Paho(port, f"start-{index}/d", secret, f"dev-{index}")
            for i in range(index, RULES, TENANTS):
                device.publish(f"s/{i}/x", b"{}", 1)
            device.close()
    finally:
        process.terminate()  # a graceful stop writes what is buffered
        assert process.wait(timeout=30) == 0
    now = datetime.now(UTC)
    rows = read_archive(LocalObjectStore(root), now - timedelta(hours=1), now + timedelta(hours=1))
    archived = {int(topic.split("/")[1]) for topic in rows.column("topic").to_pylist()}
    assert sorted(set(range(RULES)) - archived) == []
