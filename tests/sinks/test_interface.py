"""What the rules job's delivery lanes and the control plane call: the types, a writer per
action, the batch each takes, the connection test's words; a plain library (no Django, no
Spark)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.sinks import SINK_TYPES, batch_limits, check_action, writer_for


def test_every_type_has_a_writer_and_a_batch_size():
    assert SINK_TYPES == ("s3", "sqs", "kinesis", "postgres", "mqtt_bridge", "http_batch")
    limits = {kind: batch_limits({"type": kind}) for kind in SINK_TYPES}
    assert limits["kinesis"] == (500, 5 << 20)  # one PutRecords call
    assert all(records >= 100 and size >= 1 << 20 for records, size in limits.values())
    with pytest.raises(ValueError, match="not a sink type"):
        batch_limits({"type": "webhook"})
    with pytest.raises(ValueError, match="not a sink type"):
        writer_for({"type": "kafka"}, "acme")


def test_bad_settings_are_words_from_the_connection_test():
    assert check_action({"type": "sqs"}, "acme") == "the sqs action needs 'queue_url'"
    assert check_action({"type": "kinesis"}, "acme") == "the kinesis action needs 'stream'"
    assert check_action({"type": "postgres", "dsn": "host=h user=u"}, "acme") == (
        "the postgres action needs 'table'"
    )
    assert check_action({"type": "mqtt_bridge", "host": "h", "port": "x", "topic": "t"}, "a") == (
        "the bridge's 'port' is a number from 1 to 65535"
    )
    assert check_action({"type": "http_batch"}, "acme") == "the http_batch action needs 'url'"


def test_the_library_imports_neither_django_nor_spark():
    code = (
        "import sys, common.sinks.s3, common.sinks.sqs, common.sinks.kinesis, "
        "common.sinks.postgres, common.sinks.mqtt_bridge, common.sinks.http_batch\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'pyspark')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
