"""Shared fixtures. The database is a throwaway embedded cluster (control_plane.pytest_plugin)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.browser import artifacts, page  # noqa: F401 (fixtures for every browser test)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3-compatible server over HTTP on loopback; yields its endpoint URL."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.1)
    saved = {
        k: os.environ.get(k)
        for k in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL",
        )
    }
    os.environ.update(
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
    )
    yield f"http://127.0.0.1:{port}"
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="session")
def spark():
    """ONE local SparkSession for the whole suite (rules and billing): a JVM start costs seconds."""
    import logging

    from spark.session import build_session

    # py4j logs its connection teardown after pytest closed the streams: keep it quiet.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = build_session("tests", "local[2]")
    yield session
    session.stop()
