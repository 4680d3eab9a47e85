"""Shared fixtures. The database is a throwaway embedded cluster (control_plane.pytest_plugin)."""

from __future__ import annotations

import os
import socket

import pytest

from tests.browser import artifacts, page  # noqa: F401 (fixtures for every browser test)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3-compatible server over HTTP on loopback (`bench.s3`, as the archive bench runs
    it); yields its endpoint URL, with boto3's environment pointed at it meanwhile."""
    from bench.s3 import moto_server

    with moto_server() as env:
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        yield env["AWS_ENDPOINT_URL"]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def spark():
    """ONE local SparkSession for the whole suite (rules and billing): a JVM start costs seconds."""
    import logging

    from spark.session import build_session

    # py4j logs its connection teardown after pytest closed the streams: keep it quiet.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # The Python workers take the environment of the JVM's start: moto's credentials (which the
    # `s3_endpoint` fixture sets later) must be there already for a job that reads S3 objects,
    # as a deployment's workers have theirs from the start. The endpoint goes in each read's
    # options (`spark.object_source`).
    from bench.s3 import CREDENTIALS

    for name, value in CREDENTIALS.items():
        os.environ.setdefault(name, value)
    session = build_session("tests", "local[2]")
    yield session
    session.stop()
