"""The shapes of the alarm endpoints (issue 46): a definition in and out, a state, a transition,
an acknowledgement. What a value may be beyond its type is the services' check
(`tenants.alarms.services`), the same the portal gets."""

from __future__ import annotations

from collections.abc import Mapping

from rest_framework import serializers

from common.alarms.definition import MAX_SECONDS, NO_DATA_KEYS, NOTIFY_KINDS, SEVERITIES
from common.alarms.machine import EVENTS, STATES
from common.contracts.rule_actions import REDACTED
from tenants.api.serializers import RangeInput, StrictInput
from tenants.models.alarms import MAX_SEEN_DAYS, MIN_RENOTIFY_SECONDS

# CONTRACT.md's names for some fields (`{raise, for_seconds, clear, notify}`): taken as the
# same fields; answers and errors use the full names.
CONTRACT_NAMES = {
    "raise": "raise_condition",
    "for_seconds": "raise_for_seconds",
    "clear": "clear_condition",
    "notify": "notifications",
}


def _seconds(help_text: str, *, minimum: int = 0, **kwargs) -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=minimum, max_value=MAX_SECONDS, help_text=help_text, **kwargs
    )


class AlarmDefinitionInput(StrictInput):
    """A whole definition (POST, PUT); PATCH takes any part of it."""

    name = serializers.CharField(
        max_length=64, help_text="1-64 letters, digits, '_' or '-'; unique in the tenant"
    )
    description = serializers.CharField(max_length=2000, allow_blank=True, required=False)
    source = serializers.CharField(
        max_length=1024,
        help_text="a topic filter (`sensors/+/temp`) or a lifecycle source (`$events/…`)",
    )
    key = serializers.CharField(
        max_length=1000,
        required=False,
        help_text="an expression of the rules' dialect: what a state is kept per (default "
        "`clientid`; e.g. `payload.site`)",
    )
    raise_condition = serializers.CharField(
        max_length=1000,
        allow_blank=True,
        required=False,
        help_text="when a key raises, e.g. `payload.temp > 90` (also `raise`); empty: only "
        "no data raises",
    )
    raise_for_seconds = _seconds(
        "how long the raise condition must hold (also `for_seconds`)", required=False
    )
    clear_condition = serializers.CharField(
        max_length=1000,
        allow_blank=True,
        required=False,
        help_text="when an active key clears (also `clear`); empty: not the raise condition",
    )
    clear_for_seconds = _seconds(
        "how long the clear condition must hold; null: as the raise's",
        required=False,
        allow_null=True,
    )
    no_data_seconds = _seconds(
        "a key that sends nothing this long raises (cause `no_data`); null: never",
        required=False,
        allow_null=True,
    )
    no_data_keys = serializers.ChoiceField(
        choices=NO_DATA_KEYS,
        required=False,
        help_text="the keys no data watches: the tenant's `devices`, or the keys `seen` in the "
        "last `seen_days`",
    )
    seen_days = serializers.IntegerField(min_value=1, max_value=MAX_SEEN_DAYS, required=False)
    value = serializers.CharField(
        max_length=1000,
        allow_blank=True,
        required=False,
        help_text="an expression shown with each transition (e.g. `payload.temp`)",
    )
    severity = serializers.ChoiceField(choices=SEVERITIES, required=False)
    notifications = serializers.JSONField(
        required=False,
        help_text="a list of `{kind: " + "|".join(NOTIFY_KINDS) + ", target: a URL, an email "
        "address or a topic, on?: [raise, acknowledge, clear]}` (also `notify`; the rules' "
        'action shape `{"type": "webhook", "url"}` is taken too)',
    )
    renotify_seconds = _seconds(
        "while active (not acknowledged), notify again this often; null: never",
        minimum=MIN_RENOTIFY_SECONDS,
        required=False,
        allow_null=True,
    )
    enabled = serializers.BooleanField(
        required=False, help_text="false by default: try it on history first"
    )

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            data = {
                CONTRACT_NAMES[k] if k in CONTRACT_NAMES and CONTRACT_NAMES[k] not in data else k: v
                for k, v in data.items()
            }
        return super().to_internal_value(data)


class AlarmDefinitionChangeInput(AlarmDefinitionInput):
    """PUT and PATCH: the name is the definition's address and does not change."""

    name = None


class AlarmDefinitionOutput(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    source = serializers.CharField()
    key = serializers.CharField()
    raise_condition = serializers.CharField()
    raise_for_seconds = serializers.IntegerField()
    clear_condition = serializers.CharField()
    clear_for_seconds = serializers.IntegerField(allow_null=True)
    no_data_seconds = serializers.IntegerField(allow_null=True)
    no_data_keys = serializers.CharField()
    seen_days = serializers.IntegerField()
    value = serializers.CharField()
    severity = serializers.CharField()
    notifications = serializers.SerializerMethodField()
    renotify_seconds = serializers.IntegerField(allow_null=True)
    enabled = serializers.BooleanField()
    version = serializers.IntegerField(help_text="+1 on each change of what is evaluated")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_notifications(self, definition) -> list[dict]:
        # A webhook's secret signs its calls: shown to members who can write, hidden otherwise.
        shown = self.context.get("show_secrets")
        return [
            dict(n, secret=REDACTED) if "secret" in n and not shown else n
            for n in definition.notifications or []
        ]


class AlarmStateOutput(serializers.Serializer):
    id = serializers.IntegerField()
    alarm = serializers.CharField(source="definition.name")
    key = serializers.CharField(help_text="the key (a device's client id by default)")
    state = serializers.CharField(source="status", help_text=" | ".join(STATES))
    severity = serializers.CharField(source="definition.severity")
    since = serializers.DateTimeField(help_text="when it entered this state")
    value = serializers.JSONField(allow_null=True)
    cause = serializers.CharField(allow_null=True, help_text="why active: condition or no_data")
    raised_at = serializers.DateTimeField(allow_null=True)
    acknowledged_at = serializers.DateTimeField(allow_null=True)
    acknowledged_by = serializers.CharField(allow_null=True)
    cleared_at = serializers.DateTimeField(allow_null=True)
    updated_at = serializers.DateTimeField()


class AlarmNotificationOutput(serializers.Serializer):
    kind = serializers.CharField(help_text=" | ".join(NOTIFY_KINDS))
    target = serializers.CharField(help_text="the URL, address or topic, as it was when made")
    state = serializers.CharField(
        help_text="pending (not sent yet, or to be tried again) | sent | failed (given up "
        "after its attempts: `last_error` says why)"
    )
    attempts = serializers.IntegerField(help_text="sends tried so far")
    last_error = serializers.CharField(help_text="why the last attempt failed, in words; empty")
    sent_at = serializers.DateTimeField(allow_null=True)


class AlarmTransitionOutput(serializers.Serializer):
    id = serializers.IntegerField()
    alarm = serializers.CharField(source="definition.name")
    key = serializers.CharField()
    event = serializers.CharField(help_text=" | ".join(EVENTS))
    before = serializers.CharField(help_text="the state before: " + " | ".join(STATES))
    after = serializers.CharField(help_text="the state after (a renotify's is the same)")
    at = serializers.DateTimeField()
    value = serializers.JSONField(allow_null=True)
    cause = serializers.CharField(allow_null=True)
    message_id = serializers.CharField(
        allow_null=True, help_text="the message that made it (see the journey); null: a timer's"
    )
    by = serializers.CharField(allow_null=True, help_text="who acknowledged")
    note = serializers.CharField()
    notifications = AlarmNotificationOutput(
        many=True,
        read_only=True,
        help_text="whom it notified: one per target whose `on` names it, in the definition's order",
    )


class AcknowledgeInput(StrictInput):
    note = serializers.CharField(max_length=1000, allow_blank=True, required=False, default="")


class AlarmPreviewInput(RangeInput):
    """`{from, to}`: the range of history to try the alarm over."""


class AlarmPreviewKeyOutput(serializers.Serializer):
    key = serializers.CharField()
    raised = serializers.IntegerField(help_text="times it became active")
    active_seconds = serializers.FloatField(help_text="in all (to the range's end if still active)")
    longest_seconds = serializers.FloatField()
    state_at_end = serializers.CharField(help_text="its state at the range's end")


class AlarmPreviewTransitionOutput(serializers.Serializer):
    key = serializers.CharField()
    event = serializers.CharField(help_text=" | ".join(EVENTS))
    before = serializers.CharField(help_text="the state before: " + " | ".join(STATES))
    after = serializers.CharField(help_text="the state after")
    at = serializers.CharField(help_text="ISO 8601, UTC, to the millisecond")
    value = serializers.JSONField(allow_null=True)
    cause = serializers.CharField(allow_null=True)


class AlarmPreviewOutput(serializers.Serializer):
    to = serializers.DateTimeField()
    read = serializers.IntegerField(help_text="your archived messages in the range")
    considered = serializers.IntegerField(help_text="of those, what the alarm's source takes")
    evaluated = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="its expressions failed (bad JSON): no effect")
    unevaluated = serializers.IntegerField(help_text="not read within the preview's time")
    complete = serializers.BooleanField()
    raised = serializers.IntegerField(help_text="times a key became active, all keys")
    keys_raised = serializers.IntegerField()
    keys = AlarmPreviewKeyOutput(many=True, help_text="the most raised first (50 at most)")
    transitions = AlarmPreviewTransitionOutput(many=True, help_text="the first, in time order")
    seconds = serializers.FloatField()

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField()
        return dict(sorted(fields.items(), key=lambda item: item[0] != "from"))
