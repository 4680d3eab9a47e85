"""Conformance tests: the normative statements of the OASIS MQTT 3.1.1 and 5.0 specifications,
checked against a real broker process (the same one tests/broker starts: tenants `acme` and
`other` from tests/broker/conftest.py)."""

from __future__ import annotations

import pytest

from tests.broker.conftest import TENANTS, BrokerProcess, start_broker

__all__ = ["TENANTS", "BrokerProcess", "start_broker"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> BrokerProcess:
    process = start_broker(tmp_path_factory.mktemp("conformance"), "--sys-interval", "1")
    yield process
    process.stop()
