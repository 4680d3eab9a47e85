"""The sink actions' save-time check (issue 47, `common.contracts.rule_actions`'
`normalize_actions`): each type's good and bad shapes, endpoints vetted like a webhook's, and
credentials kept, sealed and hidden. Pure Python, no database."""

from __future__ import annotations

import pytest

from common.contracts.rule_actions import (
    REDACTED,
    SECRET_FIELDS,
    SINK_TYPES,
    RuleActionError,
    normalize_actions,
    redact_credentials,
    redact_secrets,
)
from common.security import sealed

KEYS = {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "s3cr3t/key+value"}
S3 = {"type": "s3", "bucket": "acme-telemetry", **KEYS}
SQS = {"type": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/readings"}
KINESIS = {"type": "kinesis", "stream": "readings", "partition_key": "${clientid}"}
DSN = "postgresql://writer:pg-pass%40word@db.example.com:5432/telemetry?sslmode=require"
POSTGRES = {
    "type": "postgres",
    "dsn": DSN,
    "table": "iot.readings",
    "columns": {"device": "${clientid}", "temp": "${payload.temp}"},
}
BRIDGE = {
    "type": "mqtt_bridge",
    "host": "broker.example.com",
    "port": 8883,
    "tls": True,
    "username": "bridge",
    "password": "bridge-pass",
    "topic": "site/${clientid}/temp",
    "qos": 1,
}
BATCH = {"type": "http_batch", "url": "https://ingest.example.com/batch"}


@pytest.fixture(autouse=True)
def _no_allow_list(monkeypatch):
    monkeypatch.delenv("WEBHOOK_ALLOW", raising=False)
    monkeypatch.delenv("WEBHOOK_ALLOW_PRIVATE", raising=False)


def one(action: dict, previous: list | None = None) -> dict:
    [stored] = normalize_actions([action], previous)
    return stored


def refused(action: dict, *words: str, position: int = 1) -> str:
    with pytest.raises(RuleActionError) as caught:
        normalize_actions([{"type": "dataset", "name": "x"}] * (position - 1) + [action])
    message = str(caught.value)
    assert message.startswith(f"Action {position}: "), message
    for word in words:
        assert word in message, message
    return message


def test_every_sink_type_is_an_action_type():
    assert set(SINK_TYPES) == {"s3", "sqs", "kinesis", "postgres", "mqtt_bridge", "http_batch"}
    assert set(SECRET_FIELDS) == set(sealed.SEALED_FIELDS)
    message = refused({"type": "kafka", "topic": "x"}, "unknown type 'kafka'")
    assert "'s3'" in message and "'mqtt_bridge'" in message


# -- s3 ----------------------------------------------------------------------------------------


def test_s3_good_shapes():
    assert one({"type": "s3", "bucket": "acme-telemetry"}) == {
        "type": "s3",
        "bucket": "acme-telemetry",
        "format": "jsonl",
    }
    full = {
        **S3,
        "prefix": "raw/",
        "format": "parquet",
        "endpoint_url": "https://minio.example.com:9000",
        "region": "eu-west-1",
    }
    assert one(full) == full


@pytest.mark.parametrize(
    "change, words",
    [
        ({"bucket": "Acme"}, ("bucket must be an S3 bucket name",)),
        ({"bucket": "ab"}, ("bucket",)),
        ({"bucket": "a..b"}, ("bucket",)),
        ({"bucket": "192.168.1.10"}, ("not an IP address",)),
        ({"bucket": 7}, ("bucket",)),
        ({"format": "csv"}, ("format must be 'jsonl' or 'parquet'",)),
        ({"prefix": "/abs"}, ("prefix must not start with '/'",)),
        ({"prefix": "a\nb"}, ("prefix",)),
        ({"prefix": "p" * 600}, ("prefix must be a string of at most 512",)),
        ({"region": "EU West"}, ("region must be a region name",)),
        ({"endpoint_url": "ftp://files.example.com"}, ("endpoint_url must be an http://",)),
        (
            {"endpoint_url": "https://u:p@s3.example.com"},
            ("endpoint_url must not carry credentials",),
        ),
        ({"endpoint_url": "http://127.0.0.1:9000"}, ("endpoint_url", "loopback", "WEBHOOK_ALLOW")),
        ({"endpoint_url": "http://169.254.169.254/"}, ("link-local",)),
        ({"endpoint_url": "http://localhost:9000"}, ("this machine",)),
        ({"secret_access_key": None}, ("access_key_id needs its secret_access_key",)),
        ({"access_key_id": None}, ("secret_access_key needs its access_key_id",)),
        ({"access_key_id": "has space"}, ("access_key_id must have no spaces",)),
        ({"acl": "public-read"}, ("unknown field(s) acl for s3",)),
    ],
)
def test_s3_bad_shapes(change, words):
    action = {**S3, **change}
    for key in [k for k, v in change.items() if v is None]:
        del action[key]
    refused(action, *words, position=2)


def test_s3_needs_a_bucket():
    refused({"type": "s3"}, "an s3 action needs bucket")


def test_an_endpoint_the_operator_allows_is_taken(monkeypatch):
    monkeypatch.setenv("WEBHOOK_ALLOW", "127.0.0.1")
    assert one({**S3, "endpoint_url": "http://127.0.0.1:9000"})["endpoint_url"].endswith(":9000")


# -- sqs ---------------------------------------------------------------------------------------


def test_sqs_good_shapes():
    assert one(SQS) == SQS
    fifo = {**SQS, "queue_url": SQS["queue_url"] + "s.fifo", **KEYS, "region": "eu-west-1"}
    assert one(fifo) == fifo


@pytest.mark.parametrize(
    "queue_url, words",
    [
        ("https://sqs.eu-west-1.amazonaws.com/", ("queue_url must be a queue's URL",)),
        ("https://sqs.example.com/1/q?x=1", ("queue_url must be a queue's URL",)),
        ("https://sqs.example.com/1/bad name", ("queue_url must have no spaces",)),
        ("sqs://queue", ("queue_url must be an http:// or https:// URL",)),
        ("http://10.0.0.5/1/q", ("queue_url", "private")),
        ("http://[::1]:9324/1/q", ("queue_url", "loopback")),
    ],
)
def test_sqs_bad_shapes(queue_url, words):
    refused({**SQS, "queue_url": queue_url}, *words)


# -- kinesis -----------------------------------------------------------------------------------


def test_kinesis_good_shapes():
    assert one(KINESIS) == KINESIS
    assert one({"type": "kinesis", "stream": "a.b-c_d"}) == {"type": "kinesis", "stream": "a.b-c_d"}


@pytest.mark.parametrize(
    "change, words",
    [
        ({"stream": "bad stream"}, ("stream must be a Kinesis stream name",)),
        ({"stream": "s" * 129}, ("stream",)),
        ({"partition_key": ""}, ("partition_key must be a template",)),
        ({"partition_key": "${clientid"}, ("partition_key", "never closed")),
        ({"partition_key": "${}"}, ("partition_key", "must name a field")),
        ({"partition_key": 5}, ("partition_key",)),
    ],
)
def test_kinesis_bad_shapes(change, words):
    refused({**KINESIS, **change}, *words)


# -- postgres ----------------------------------------------------------------------------------


def test_postgres_good_shapes():
    assert one(POSTGRES) == POSTGRES
    plain = {"type": "postgres", "dsn": "postgres://db.example.com/t", "table": "readings"}
    assert one(plain) == plain


@pytest.mark.parametrize(
    "change, words",
    [
        ({"dsn": "host=db.example.com password=x"}, ("dsn must be a postgresql:// URL",)),
        ({"dsn": "mysql://db.example.com/t"}, ("dsn must be a postgresql:// URL",)),
        ({"dsn": "postgresql:///t?host=/var/run/postgresql"}, ("dsn must name one host",)),
        ({"dsn": "postgresql://a.example.com,b.example.com/t"}, ("dsn must name one host",)),
        ({"dsn": "postgresql://db.example.com/t?host=10.0.0.1"}, ("option 'host' is not allowed",)),
        ({"dsn": "postgresql://db.example.com/t?hostaddr=10.0.0.1"}, ("option 'hostaddr'",)),
        ({"dsn": "postgresql://db.example.com/t?passfile=/etc/x"}, ("option 'passfile'",)),
        ({"dsn": "postgresql://db.example.com/t?sslmode=sometimes"}, ("sslmode must be one of",)),
        ({"dsn": "postgresql://u:p@127.0.0.1:5432/t"}, ("dsn's host 127.0.0.1:5432", "loopback")),
        ({"dsn": "postgresql://u:p@localhost/t"}, ("dsn's host", "this machine")),
        ({"dsn": "postgresql://db.example.com:99999/t"}, ("dsn: the port",)),
        ({"dsn": "postgresql://db.example.com/t x"}, ("dsn must have no spaces",)),
        ({"dsn": REDACTED}, ("dsn is hidden",)),
        ({"table": "readings; drop table x"}, ("table must be a table's name",)),
        ({"table": '"Quoted"'}, ("table must be a table's name",)),
        ({"table": "a.b.c"}, ("table",)),
        ({"columns": {}}, ("columns must be an object of 1 to 256",)),
        ({"columns": ["device"]}, ("columns must be an object",)),
        ({"columns": {"bad column": "${clientid}"}}, ("columns: 'bad column' is not a column",)),
        ({"columns": {"temp": 5}}, ("columns: temp must be a string template",)),
        ({"columns": {"temp": "${payload.temp"}}, ("columns: temp", "never closed")),
    ],
)
def test_postgres_bad_shapes(change, words):
    refused({**POSTGRES, **change}, *words)


# -- mqtt_bridge -------------------------------------------------------------------------------


def test_mqtt_bridge_good_shapes():
    assert one(BRIDGE) == BRIDGE
    least = {
        "type": "mqtt_bridge",
        "host": "93.184.215.14",
        "port": 1883,
        "topic": "$aws/rules/r/x",
    }
    assert one(least) == least


@pytest.mark.parametrize(
    "change, words",
    [
        ({"host": "mqtt://broker.example.com"}, ("host must be the far broker's host name",)),
        ({"host": "broker.example.com:1883"}, ("host must be",)),
        ({"host": "127.0.0.1"}, ("host 127.0.0.1:8883", "loopback")),
        ({"host": "localhost"}, ("this machine",)),
        ({"port": 0}, ("port must be a number from 1 to 65535",)),
        ({"port": "1883"}, ("port must be a number",)),
        ({"port": True}, ("port",)),
        ({"tls": "yes"}, ("tls must be true or false",)),
        ({"qos": 3}, ("qos must be 0, 1 or 2",)),
        ({"topic": "site/+/x"}, ("topic 'site/+/x' is not a valid topic", "wildcard")),
        ({"topic": ""}, ("topic must be a non-empty template",)),
        ({"topic": "a/${clientid"}, ("topic", "never closed")),
        ({"username": ""}, ("username must be a non-empty string",)),
        ({"password": 12}, ("password must be a string",)),
    ],
)
def test_mqtt_bridge_bad_shapes(change, words):
    refused({**BRIDGE, **change}, *words)


def test_mqtt_bridge_needs_host_port_and_topic():
    refused({"type": "mqtt_bridge", "host": "b.example.com"}, "needs port, topic")


# -- http_batch --------------------------------------------------------------------------------


def test_http_batch_gets_a_signing_secret_and_keeps_it_for_its_url():
    stored = one(BATCH)
    assert len(stored["secret"]) >= 32 and stored["url"] == BATCH["url"]
    assert one(BATCH, [stored])["secret"] == stored["secret"]
    assert one({**BATCH, "secret": REDACTED}, [stored])["secret"] == stored["secret"]
    moved = one({**BATCH, "url": "https://elsewhere.example.com/b"}, [stored])
    assert moved["secret"] != stored["secret"]
    # A webhook of the same URL has a secret of its own.
    assert one({"type": "webhook", "url": BATCH["url"]}, [stored])["secret"] != stored["secret"]


@pytest.mark.parametrize(
    "change, words",
    [
        ({"url": "http://10.1.2.3/batch"}, ("url", "private", "WEBHOOK_ALLOW")),
        ({"url": "https://u:p@ingest.example.com/"}, ("url must not carry credentials",)),
        ({"secret": "short"}, ("secret must be a string of 16 to 256",)),
        ({"batch_size": 10}, ("unknown field(s) batch_size",)),
    ],
)
def test_http_batch_bad_shapes(change, words):
    refused({**BATCH, **change}, *words)


# -- credentials kept, sealed and hidden ---------------------------------------------------------


def test_a_credential_left_out_is_kept_for_the_same_destination_only():
    stored = normalize_actions([S3, {**SQS, **KEYS}, POSTGRES, BRIDGE])
    again = [
        {k: v for k, v in S3.items() if k != "secret_access_key"},
        {**SQS, "access_key_id": KEYS["access_key_id"], "secret_access_key": REDACTED},
        {**POSTGRES, "dsn": DSN.replace("pg-pass%40word", REDACTED)},
        {k: v for k, v in BRIDGE.items() if k != "password"},
    ]
    assert normalize_actions(again, stored) == stored
    # Redacted as a member who may write sees them, saved back unchanged: the same actions.
    assert normalize_actions(redact_credentials(stored), stored) == stored


@pytest.mark.parametrize(
    "moved",
    [
        {**S3, "endpoint_url": "https://evil.example.net", "secret_access_key": REDACTED},
        {**S3, "access_key_id": "AKIAOTHER", "secret_access_key": REDACTED},
        {**POSTGRES, "dsn": "postgresql://writer:********@evil.example.net/telemetry"},
        {**POSTGRES, "dsn": "postgresql://other:********@db.example.com/telemetry"},
        {**BRIDGE, "host": "evil.example.net", "password": REDACTED},
        {**BRIDGE, "tls": False, "password": REDACTED},
    ],
)
def test_a_stored_credential_never_follows_a_changed_destination(moved):
    """Whoever may edit the rule but was never shown the credential cannot send it elsewhere."""
    stored = normalize_actions([S3, POSTGRES, BRIDGE])
    refused(moved, "hidden", "give it again")
    with pytest.raises(RuleActionError, match="hidden"):
        normalize_actions([moved], stored)


def test_a_bridge_password_left_out_for_a_new_host_is_no_password():
    stored = normalize_actions([BRIDGE])
    without = {k: v for k, v in BRIDGE.items() if k != "password"}
    assert "password" not in one({**without, "host": "other.example.com"}, stored)


def test_a_dsn_saved_with_its_password_hidden_keeps_the_new_options():
    stored = normalize_actions([POSTGRES])
    shown = redact_credentials(stored)[0]["dsn"]
    assert shown == "postgresql://writer:********@db.example.com:5432/telemetry?sslmode=require"
    changed = one({**POSTGRES, "dsn": shown.replace("require", "verify-full")}, stored)
    assert changed["dsn"] == DSN.replace("require", "verify-full")


def test_readers_see_no_secret_and_writers_no_credential():
    stored = normalize_actions([S3, POSTGRES, BRIDGE, BATCH])
    for_readers = redact_secrets(stored)
    for_writers = redact_credentials(stored)
    text = repr(for_readers) + repr(for_writers)
    for secret in ("s3cr3t/key+value", "pg-pass", "bridge-pass"):
        assert secret not in text
    assert for_readers[3]["secret"] == REDACTED
    assert for_writers[3]["secret"] == stored[3]["secret"]  # it checks signatures with it
    assert for_writers[0]["access_key_id"] == "AKIAEXAMPLE"  # not a secret
    assert for_writers[1]["dsn"].startswith("postgresql://writer:********@db.example.com")


def test_every_secret_field_is_sealed_at_rest_and_opens_again(monkeypatch):
    monkeypatch.setenv("SEALING_KEY", "a-test-sealing-key-" + "x" * 40)
    stored = normalize_actions([S3, POSTGRES, BRIDGE, BATCH])
    at_rest = sealed.seal_actions(stored)
    text = repr(at_rest)
    for secret in ("s3cr3t/key+value", "pg-pass", "bridge-pass", stored[3]["secret"]):
        assert secret not in text
    assert at_rest[0]["access_key_id"] == "AKIAEXAMPLE" and at_rest[0]["bucket"] == S3["bucket"]
    assert sealed.open_actions(at_rest) == stored
