"""The REST API's serializers of the quota and its throttling figures, and of usage by the minute
or as a series (`usage_views`)."""

from __future__ import annotations

from rest_framework import serializers

from tenants.models import QUOTA_KEYS


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
