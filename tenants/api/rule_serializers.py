"""The REST API's serializers of rules: a rule in and out (actions with their secrets redacted),
its metrics and dead letters, a replay's answer, and the dry run's sample message
(`rule_views`)."""

from __future__ import annotations

import json

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.contracts.rule_actions import redact_credentials, redact_secrets
from tenants.api.serializers import StrictInput
from tenants.rules import selectors as rule_selectors

MAX_RULE_SQL = 20_000  # characters; bounds what one compile (or dry run) may cost
MAX_SAMPLE_PAYLOAD = 1_048_576

ACTIONS_HELP = (
    'Several per rule. {"type": "republish", "topic": "alerts/${clientid}", "payload"?: template, '
    '"qos"?: 0-2, "retain"?: bool} | {"type": "webhook", "url": "https://…", "secret"?: str '
    "(generated when omitted; signs X-Signature-256)} | "
    '{"type": "dataset", "name": slug} | sinks (delivered through a durable outbox): '
    '{"type": "s3", "bucket", "prefix"?, "format"?: "jsonl"|"parquet", "endpoint_url"?, '
    '"region"?, "access_key_id"?, "secret_access_key"?} | {"type": "sqs", "queue_url", '
    '…credentials as s3} | {"type": "kinesis", "stream", "partition_key"?: template, …} | '
    '{"type": "postgres", "dsn": "postgresql://…", "table", "columns"?: {column: template}} | '
    '{"type": "mqtt_bridge", "host", "port", "tls"?, "username"?, "password"?, "topic": '
    'template, "qos"?} | {"type": "http_batch", "url", "secret"?}. Credentials are never shown '
    "again (********); saving one as ******** or without it keeps it for the same destination."
)


class RuleInput(StrictInput):
    name = serializers.CharField(max_length=64)
    sql = serializers.CharField(max_length=MAX_RULE_SQL, help_text="EMQX rule SQL (docs/rules.md)")
    actions = serializers.ListField(
        child=serializers.DictField(), required=False, default=list, help_text=ACTIONS_HELP
    )
    enabled = serializers.BooleanField(required=False, default=True)


class RuleUpdateInput(StrictInput):
    sql = serializers.CharField(max_length=MAX_RULE_SQL, required=False)
    actions = serializers.ListField(
        child=serializers.DictField(), required=False, help_text=ACTIONS_HELP
    )
    enabled = serializers.BooleanField(required=False)


class RuleMetricsOutput(serializers.Serializer):
    matched = serializers.IntegerField(help_text="messages the FROM took")
    passed = serializers.IntegerField(help_text="messages whose WHERE held")
    failed = serializers.IntegerField(help_text="messages whose evaluation raised")
    actions_ok = serializers.IntegerField()
    actions_failed = serializers.IntegerField(help_text="after every retry")
    last_error = serializers.CharField(allow_blank=True)
    last_error_at = serializers.DateTimeField(allow_null=True)
    lag_ms = serializers.IntegerField(allow_null=True, help_text="publish → action, last batch")
    latency_p50_ms = serializers.IntegerField(
        allow_null=True, help_text="publish → action done, median of the last five minutes"
    )
    latency_p99_ms = serializers.IntegerField(
        allow_null=True, help_text="publish → action done, 99th percentile of the last five minutes"
    )
    updated_at = serializers.DateTimeField(allow_null=True)


class RulePausedOutput(serializers.Serializer):
    at = serializers.DateTimeField(source="paused_at")
    reason = serializers.CharField(source="paused_reason")


class RuleOutput(serializers.Serializer):
    name = serializers.CharField()
    sql = serializers.CharField()
    actions = serializers.ListField(child=serializers.DictField())
    enabled = serializers.BooleanField()
    paused = serializers.SerializerMethodField(
        help_text="null, or when and why the live job paused the rule for going over its "
        "budget; saving its SQL or enabling it again resumes it"
    )
    metrics = serializers.SerializerMethodField()
    dead_letters = serializers.IntegerField(source="dead_letters_count", default=0)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(RulePausedOutput(allow_null=True))
    def get_paused(self, rule) -> dict | None:
        return RulePausedOutput(rule).data if rule.paused_at else None

    @extend_schema_field(RuleMetricsOutput)
    def get_metrics(self, rule) -> dict:
        return RuleMetricsOutput(rule_selectors.rule_metrics(rule)).data

    def to_representation(self, rule):
        data = super().to_representation(rule)
        if not self.context.get("show_secrets"):  # only members who can write see them
            data["actions"] = redact_secrets(data["actions"])
        else:  # signing secrets, never a sink's credentials (saving them back keeps them)
            data["actions"] = redact_credentials(data["actions"])
        return data


class RuleDeadLetterOutput(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.SerializerMethodField()
    output = serializers.JSONField()
    error = serializers.CharField()
    attempts = serializers.IntegerField()
    created_at = serializers.DateTimeField()

    def get_action(self, letter) -> dict:
        return redact_secrets([letter.action])[0]


class RuleTestContextInput(StrictInput):
    """One sample message (or lifecycle event); what is left out gets EMQX's example values
    (filled by `common.rules.dry_run`, the one place that knows them)."""

    topic = serializers.CharField(max_length=65535, required=False, help_text="default t/a")
    payload = serializers.JSONField(
        required=False,
        help_text='a string (default {"msg": "hello"}); a JSON object or array is encoded for you',
    )
    qos = serializers.IntegerField(min_value=0, max_value=2, required=False, help_text="default 1")
    retain = serializers.BooleanField(required=False)
    clientid = serializers.CharField(max_length=65535, allow_blank=True, required=False)
    username = serializers.CharField(max_length=65535, allow_blank=True, required=False)
    timestamp = serializers.IntegerField(
        min_value=0, required=False, help_text="ms since the epoch; default now"
    )
    user_properties = serializers.DictField(
        child=serializers.CharField(allow_blank=True), required=False
    )
    event = serializers.CharField(
        max_length=64,
        required=False,
        help_text="message.publish (default), client.connected, client.disconnected, "
        "session.subscribed or session.unsubscribed",
    )
    peerhost = serializers.CharField(
        max_length=255,
        required=False,
        help_text="the client's address: what peerhost, clientip() and peerhost() give",
    )
    reason = serializers.CharField(max_length=255, required=False, help_text="disconnections")

    def validate_payload(self, value):
        payload = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        if len(payload) > MAX_SAMPLE_PAYLOAD:
            raise serializers.ValidationError(f"At most {MAX_SAMPLE_PAYLOAD} characters.")
        return payload


class RuleTestInput(StrictInput):
    sql = serializers.CharField(max_length=MAX_RULE_SQL, trim_whitespace=False)
    context = RuleTestContextInput(required=False, default=dict)


class RuleTestOutput(serializers.Serializer):
    match = serializers.BooleanField()
    outputs = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="present when match is true: one object for SELECT, 0..n for FOREACH",
    )


class DeadLetterReplayOutput(serializers.Serializer):
    replayed = serializers.IntegerField(help_text="webhook letters re-sent by this call")
    queued = serializers.IntegerField(
        help_text="sink letters put back into their sink's outbox (the rules job delivers them)"
    )
    delivered = serializers.IntegerField(help_text="accepted by the receiver (and deleted)")
    failed = serializers.IntegerField(help_text="failed again (kept, error updated)")
    orphaned = serializers.IntegerField(
        help_text="kept: the rule has no webhook to that URL (or no such sink) now"
    )
    done_already = serializers.IntegerField(
        help_text="dropped, not sent: a run over history did that action since"
    )
    remaining = serializers.IntegerField(help_text="dead letters left")
