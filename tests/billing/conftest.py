"""One local Spark session for every billing test (starting one costs seconds)."""

from __future__ import annotations

import logging

import pytest

# py4j logs its connection teardown after pytest closed the streams: keep it quiet.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def spark():
    from spark.billing.session import build_session

    session = build_session("billing-tests", master="local[2]")
    yield session
    session.stop()
