"""Input and output serializers, one pair per API. Inputs only validate shapes; the services
validate meaning (and answer with messages the error handler turns into 400s)."""

from __future__ import annotations

import json

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.contracts.rule_actions import redact_credentials, redact_secrets
from tenants.devices import disconnect_reasons
from tenants.models import QUOTA_KEYS
from tenants.rules import selectors as rule_selectors


class StrictInput(serializers.Serializer):
    """Unknown fields are an error, not silently ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
        return super().to_internal_value(data)


class RangeInput(StrictInput):
    """`{from, to}`: a range of history (`from` inclusive, `to` exclusive), with zones."""

    to = serializers.DateTimeField(help_text="end of the range (exclusive), ISO 8601 with zone")

    def get_fields(self):
        fields = super().get_fields()
        # `from` is a Python keyword: declared here rather than as an attribute.
        fields["from"] = serializers.DateTimeField(
            help_text="start of the range (inclusive), ISO 8601 with zone"
        )
        return dict(sorted(fields.items(), key=lambda item: item[0] != "from"))


# -- auth -----------------------------------------------------------------------------------


class SignupInput(StrictInput):
    tenant = serializers.CharField(max_length=64)
    email = serializers.CharField(max_length=254)
    password = serializers.CharField(max_length=128, style={"input_type": "password"})


class TenantOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    status = serializers.CharField()
    plan = serializers.CharField(source="plan.slug")
    acl_default = serializers.CharField()
    archive_enabled = serializers.BooleanField()
    queue_qos0_offline = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class SignupUserOutput(serializers.Serializer):
    email = serializers.CharField()
    email_verified = serializers.BooleanField(
        help_text="False until the link mailed to the address is followed (logged in as this "
        "account); meanwhile the account uses its own new tenant but is given nothing else."
    )


class SignupOutput(serializers.Serializer):
    tenant = TenantOutput()
    token = serializers.CharField()
    user = SignupUserOutput()


class TokenInput(StrictInput):
    email = serializers.CharField(max_length=254)
    password = serializers.CharField(max_length=128)
    tenant = serializers.CharField(max_length=64, required=False)
    rotate = serializers.BooleanField(
        required=False,
        default=False,
        help_text="true: replace your login token for this tenant with a new one (the old one "
        "stops working at once); else the live one is handed out again.",
    )


class TokenOutput(serializers.Serializer):
    token = serializers.CharField()
    tenant = serializers.CharField()


class CurrentTenantOutput(TenantOutput):
    role = serializers.CharField()


class TenantSettingsInput(StrictInput):
    name = serializers.CharField(max_length=128, required=False)
    acl_default = serializers.ChoiceField(choices=["allow", "deny"], required=False)
    archive_enabled = serializers.BooleanField(
        required=False,
        help_text="false: keep no history (history policies and the plan's default suspended; "
        "enabled rules still get their feed)",
    )
    queue_qos0_offline = serializers.BooleanField(required=False)


class ApiTokenInput(StrictInput):
    name = serializers.CharField(max_length=64, required=False, default="default")


class ApiTokenOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    login = serializers.BooleanField(
        source="is_login_token",
        help_text="true: the login token `POST /auth/token` hands out (and rotates)",
    )
    prefix = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)


class ApiTokenCreatedOutput(ApiTokenOutput):
    token = serializers.CharField()


# -- devices --------------------------------------------------------------------------------


class DeviceCreateInput(StrictInput):
    name = serializers.CharField(max_length=64)
    client_id_policy = serializers.ChoiceField(["exact", "any", "pattern"], default="exact")
    client_id_pattern = serializers.CharField(max_length=255, required=False, default="")
    attributes = serializers.DictField(required=False, default=dict)
    enabled = serializers.BooleanField(required=False, default=True)


class DeviceUpdateInput(StrictInput):
    client_id_policy = serializers.ChoiceField(["exact", "any", "pattern"], required=False)
    client_id_pattern = serializers.CharField(max_length=255, required=False, allow_blank=True)
    attributes = serializers.DictField(required=False)
    enabled = serializers.BooleanField(required=False)


class DeviceOutput(serializers.Serializer):
    name = serializers.CharField()
    username = serializers.CharField()
    enabled = serializers.BooleanField()
    client_id_policy = serializers.CharField()
    client_id_pattern = serializers.CharField()
    attributes = serializers.DictField()
    last_seen_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    connected = serializers.BooleanField(
        default=False, help_text="whether the device has a live MQTT connection now"
    )
    last_disconnect_reason = serializers.CharField(
        help_text="why its last connection ended (EMQX's words: normal, kicked, "
        "keepalive_timeout, takenover, tcp_closed, ...); empty if it never disconnected"
    )
    last_disconnect_description = serializers.SerializerMethodField(
        help_text='that reason in words ("Keep-alive timeout: the broker heard nothing …"); '
        "empty if it never disconnected"
    )
    last_disconnected_at = serializers.DateTimeField(allow_null=True)

    def get_last_disconnect_description(self, device) -> str:
        described = disconnect_reasons.describe(device.last_disconnect_reason)
        return described.sentence if described else ""


class DeviceCreatedOutput(DeviceOutput):
    password = serializers.CharField(help_text="the device secret: shown once, never again")


class CredentialRotateInput(StrictInput):
    expires_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="when the NEW secret stops working (null: never)",
    )
    grace_seconds = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=30 * 86_400,
        default=24 * 3600,
        help_text="how long the previous secret keeps working (default 86400 = 24 h; "
        "0 retires it now and drops the connections that use it)",
    )


class CredentialOutput(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="when the broker stops accepting it (null: never)"
    )
    revoked_at = serializers.DateTimeField(allow_null=True)
    retired_at = serializers.DateTimeField(
        allow_null=True, help_text="when a rotation replaced it (its grace period began)"
    )
    state = serializers.ChoiceField(
        ["active", "retiring", "expired", "revoked"],
        help_text="active; retiring (replaced, accepted until expires_at); expired; revoked",
    )
    active = serializers.BooleanField(source="is_active", help_text="accepted by the broker now")


class CredentialCreatedOutput(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    password = serializers.CharField(help_text="shown once, never again")
    expires_at = serializers.DateTimeField(allow_null=True)
    previous = CredentialOutput(
        many=True, help_text="the device's other secrets after the rotation, with their state"
    )


# -- ACLs -----------------------------------------------------------------------------------


class AclInput(StrictInput):
    device = serializers.CharField(max_length=64, required=False, allow_null=True, default=None)
    action = serializers.ChoiceField(["publish", "subscribe", "both"])
    permission = serializers.ChoiceField(["allow", "deny"])
    topic = serializers.CharField(max_length=512)
    position = serializers.IntegerField(
        min_value=0, max_value=2_147_483_647, required=False, allow_null=True, default=None
    )


class AclUpdateInput(StrictInput):
    action = serializers.ChoiceField(["publish", "subscribe", "both"], required=False)
    permission = serializers.ChoiceField(["allow", "deny"], required=False)
    topic = serializers.CharField(max_length=512, required=False)
    position = serializers.IntegerField(min_value=0, max_value=2_147_483_647, required=False)


class AclOutput(serializers.Serializer):
    id = serializers.IntegerField()
    device = serializers.CharField(source="device.name", allow_null=True, default=None)
    action = serializers.CharField()
    permission = serializers.CharField()
    topic = serializers.CharField()
    position = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class AclTestInput(StrictInput):
    device = serializers.CharField(max_length=64, help_text="one of the tenant's device names")
    action = serializers.ChoiceField(["publish", "subscribe"])
    topic = serializers.CharField(
        max_length=512, help_text="a topic name to publish to, or a topic filter to subscribe to"
    )


class AclTestOutput(serializers.Serializer):
    device = serializers.CharField()
    action = serializers.CharField()
    topic = serializers.CharField()
    allowed = serializers.BooleanField(help_text="the broker's answer")
    decided_by = serializers.ChoiceField(
        ["rule", "default"], help_text="a rule matched, or none did and the default decided"
    )
    rule = AclOutput(allow_null=True, help_text="the rule that decided, if one did")


# -- rules ----------------------------------------------------------------------------------


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


# -- quota, usage, invoices -----------------------------------------------------------------


class LimitActivityOutput(serializers.Serializer):
    limit = serializers.CharField(
        help_text="the broker's name for the limit: publish_rate, device_publish_rate, "
        "inbound_bytes_rate, outbound_rate, message_size, retained, connections, "
        "subscriptions, persistent_sessions (more may be added)"
    )
    quota_key = serializers.CharField(
        allow_null=True, help_text="the quota key it enforces (max_publish_rate, …)"
    )
    value = serializers.IntegerField(allow_null=True, help_text="that quota's value now")
    slowed = serializers.IntegerField(
        help_text="times it slowed something down (a publisher paused, deliveries paced): "
        "nothing refused, nothing lost"
    )
    refused = serializers.IntegerField(
        help_text="times it refused something (a message, connection, subscription or "
        "session not taken; the client was told)"
    )
    last_slowed_at = serializers.DateTimeField(
        allow_null=True, help_text="the start of the last minute it slowed something"
    )
    last_refused_at = serializers.DateTimeField(
        allow_null=True, help_text="the start of the last minute it refused something"
    )


class DroppedOutput(serializers.Serializer):
    messages = serializers.IntegerField(
        help_text="messages not taken or copies not delivered (the causes less the "
        "connections, subscriptions and sessions refused)"
    )
    causes = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="every drop cause with its count: queue_full, offline_qos0, expired, "
        "too_large, acl, and a limit's refusals as quota_<limit> (also in `limits`)",
    )


class ThrottlingWindowOutput(serializers.Serializer):
    # `from` is a Python keyword: declared below.
    to = serializers.DateTimeField()
    limits = LimitActivityOutput(
        many=True, help_text="each limit that slowed or refused anything, busiest first"
    )
    dropped = DroppedOutput()


ThrottlingWindowOutput._declared_fields["from"] = serializers.DateTimeField(
    help_text="the window counts the minutes starting at or after this"
)


class ThrottlingOutput(serializers.Serializer):
    last_hour = ThrottlingWindowOutput()
    last_24h = ThrottlingWindowOutput()


class QuotaOutput(serializers.Serializer):
    plan = serializers.CharField()
    limits = serializers.DictField(child=serializers.IntegerField())
    overrides = serializers.DictField(child=serializers.IntegerField())
    keys = serializers.ListField(child=serializers.CharField(), default=list(QUOTA_KEYS))
    throttling = ThrottlingOutput(
        help_text="how often each limit slowed or refused something, and what was dropped, "
        "in the last hour and the last 24 hours (per minute, up to the last complete minute)"
    )


SINK_BYTES_HELP = "JSON bytes of rule outputs bucket (s3) sinks took"


class UsageOutput(serializers.Serializer):
    minute = serializers.DateTimeField()
    connection_seconds = serializers.IntegerField()
    messages_in = serializers.IntegerField()
    messages_out = serializers.IntegerField()
    bytes_in = serializers.IntegerField()
    bytes_out = serializers.IntegerField()
    dropped = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="drops in this minute by cause (a limit's refusals as quota_<limit>)",
    )
    throttled = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="slowdowns in this minute by limit (publish_rate, …): not drops",
    )
    retained_count = serializers.IntegerField()
    stored_bytes = serializers.IntegerField()
    shadow_operations = serializers.IntegerField(help_text="device shadow operations, 1 KiB units")
    job_executions = serializers.IntegerField(help_text="job executions queued (retries too)")
    sink_bytes = serializers.IntegerField(help_text=SINK_BYTES_HELP)


class UsagePointOutput(serializers.Serializer):
    start = serializers.DateTimeField()
    messages = serializers.IntegerField(help_text="billable 5 KB message units")
    connection_minutes = serializers.IntegerField()
    rules_triggered = serializers.IntegerField()
    actions_executed = serializers.IntegerField()
    storage_byte_hours = serializers.IntegerField()
    storage_gb_hours = serializers.FloatField()
    publishes_in = serializers.IntegerField()
    deliveries_out = serializers.IntegerField()
    bytes_in = serializers.IntegerField()
    bytes_out = serializers.IntegerField()
    shadow_operations = serializers.IntegerField(help_text="device shadow operations, 1 KiB units")
    job_executions = serializers.IntegerField(help_text="job executions queued (retries too)")
    sink_bytes = serializers.IntegerField(help_text=SINK_BYTES_HELP)
    sink_gb = serializers.FloatField(help_text="sink_bytes in GB (10^9 bytes), as billed")


class UsageSeriesOutput(serializers.Serializer):
    # `from` is a Python keyword: declared below.
    to = serializers.DateTimeField()
    granularity = serializers.ChoiceField(choices=["hour", "day"])
    series = UsagePointOutput(many=True)


UsageSeriesOutput._declared_fields["from"] = serializers.DateTimeField()


class UsageResponse(serializers.Serializer):
    """`GET /usage` in its two forms, for the schema: with `from`/`to`/`granularity`, the series
    per dimension (`from`, `to`, `granularity`, `series`); without, a page of raw minutes
    (`count`, `next`, `previous`, `results`)."""

    to = serializers.DateTimeField(required=False)
    granularity = serializers.ChoiceField(choices=["hour", "day"], required=False)
    series = UsagePointOutput(many=True, required=False)
    rows = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="with `by`: per UTC day, {day, device, messages, connection_minutes, "
        "rules_triggered, actions_executed, shadow_operations} or {day, group, messages, "
        "connection_minutes, rules_triggered, actions_executed, shadow_operations, devices}",
    )
    devices = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="with `by=device`: each device's totals {device, messages, connection_minutes, "
        "rules_triggered, actions_executed, shadow_operations}",
    )
    groups = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="with `by=group`: each group's totals {group, members, devices, messages, "
        "connection_minutes, rules_triggered, actions_executed, shadow_operations}; devices in "
        'no group under "(no group)"',
    )
    count = serializers.IntegerField(required=False)
    next = serializers.URLField(allow_null=True, required=False)
    previous = serializers.URLField(allow_null=True, required=False)
    results = UsageOutput(many=True, required=False)


UsageResponse._declared_fields["from"] = serializers.DateTimeField(required=False)


class InvoiceLineOutput(serializers.Serializer):
    code = serializers.ChoiceField(
        choices=[
            "base_fee",
            "messages",
            "connection_minutes",
            "rules_triggered",
            "actions_executed",
            "storage_gb_hours",
            "job_executions",
            "shadow_operations",
            "sink_gb",
            "adjustment",
            "credit",
        ]
    )
    description = serializers.CharField()
    quantity = serializers.FloatField()
    included = serializers.FloatField()
    billable = serializers.FloatField()
    unit_price = serializers.CharField(help_text="decimal text, per `per` units")
    per = serializers.IntegerField()
    amount_cents = serializers.IntegerField()
    for_period = serializers.CharField(required=False, help_text="adjustments: the month adjusted")
    label = serializers.CharField(
        help_text='in words with its unit: "Messages (per million, 5 KB units)"'
    )
    unit = serializers.CharField(help_text="what `quantity` counts: minutes, GB-hours…")


class InvoiceOutput(serializers.Serializer):
    period = serializers.CharField()
    status = serializers.CharField()
    currency = serializers.CharField()
    total_cents = serializers.IntegerField()
    lines = serializers.SerializerMethodField()
    line_items = serializers.SerializerMethodField(help_text="the same lines (older name)")
    price_book_version = serializers.IntegerField(allow_null=True)
    checksum = serializers.CharField()
    input_checksum = serializers.CharField()
    issued_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    number = serializers.CharField(allow_null=True, help_text="sequential per issuer; set at issue")
    issue_date = serializers.DateField(allow_null=True)
    due_date = serializers.DateField(allow_null=True)
    issuer = serializers.JSONField(help_text="{name, address: [lines], tax_id, email} at issue")
    billed_to = serializers.JSONField(
        help_text="{company_name, address: [lines], country, tax_id, email, purchase_order}"
    )
    subtotal_cents = serializers.IntegerField(source="total_cents", help_text="= total_cents")
    tax_name = serializers.CharField()
    tax_rate = serializers.DecimalField(max_digits=6, decimal_places=3, help_text="percent")
    tax_cents = serializers.IntegerField()
    total_due_cents = serializers.IntegerField(help_text="total_cents + tax_cents")

    def _lines(self, invoice) -> list[dict]:
        from tenants.billing.invoice_words import line_label, line_unit

        return [
            {**line, "label": line_label(line), "unit": line_unit(line)}
            for line in invoice.line_items
        ]

    @extend_schema_field(InvoiceLineOutput(many=True))
    def get_lines(self, invoice) -> list[dict]:
        return self._lines(invoice)

    @extend_schema_field(InvoiceLineOutput(many=True))
    def get_line_items(self, invoice) -> list[dict]:
        return self._lines(invoice)


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
