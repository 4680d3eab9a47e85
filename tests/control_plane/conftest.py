"""Fixtures of the control plane's tests."""

import json

import psycopg
import pytest
from django.conf import settings
from django.db import connection


@pytest.fixture
def listener():
    """The change notifications the brokers hear, on a real LISTEN connection: `listener(n)`
    waits for up to n of them (`timeout` seconds at most)."""
    params = connection.get_connection_params()
    conn = psycopg.connect(
        host=params["host"],
        port=params["port"],
        user=params["user"],
        dbname=params["dbname"],
        autocommit=True,
    )
    conn.execute(f"LISTEN {settings.CONFIG_NOTIFY_CHANNEL}")

    def received(expect: int, timeout: float = 5.0) -> list[dict]:
        return [json.loads(n.payload) for n in conn.notifies(timeout=timeout, stop_after=expect)]

    yield received
    conn.close()
