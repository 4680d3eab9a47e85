"""The portal's alarm definition form (issue 46). It only turns the posted text into the values
the REST API takes (numbers read, the notifications' JSON parsed, an empty box the field's
default); what those values may be is `tenants.alarms.services`' check, the same the API gets,
so a bad value is refused in the same words, on the same field, through either door."""

from __future__ import annotations

from django import forms

from common.alarms.definition import MAX_SECONDS, NO_DATA_KEYS, SEVERITIES
from tenants.alarms.services import alarm_definition_defaults
from tenants.portal.job_forms import JsonField

# Empty boxes that mean the field's default rather than "none".
DEFAULTED = ("key", "raise_for_seconds", "no_data_keys", "seen_days", "severity")


def _seconds(label: str, help_text: str) -> forms.IntegerField:
    return forms.IntegerField(
        label=label, required=False, min_value=0, max_value=MAX_SECONDS, help_text=help_text
    )


def _expression(label: str, help_text: str, rows: int = 2) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        max_length=1000,
        strip=False,
        widget=forms.Textarea(attrs={"rows": rows, "spellcheck": "false", "class": "code"}),
        help_text=help_text,
    )


class AlarmDefinitionForm(forms.Form):
    name = forms.CharField(max_length=64, help_text="1-64 letters, digits, '_' or '-'.")
    description = forms.CharField(required=False, max_length=2000)
    source = forms.CharField(
        max_length=1024,
        help_text="A topic filter (sensors/+/temp) or a lifecycle source ($events/…).",
    )
    key = forms.CharField(
        required=False,
        max_length=1000,
        help_text="What a state is kept per: an expression (default clientid; e.g. payload.site).",
    )
    raise_condition = _expression(
        "Raise when", "An expression, e.g. payload.temp > 90. Empty: only no data raises."
    )
    raise_for_seconds = _seconds("For (seconds)", "How long it must hold; empty or 0: at once.")
    clear_condition = _expression("Clear when", "Empty: when the raise condition no longer holds.")
    clear_for_seconds = _seconds("Clear for (seconds)", "Empty: as long as the raise's.")
    no_data_seconds = _seconds(
        "No data after (seconds)", "A key silent this long raises. Empty: never."
    )
    no_data_keys = forms.ChoiceField(
        choices=[(k, k) for k in NO_DATA_KEYS],
        required=False,
        initial="seen",
        help_text="The keys no data watches: the tenant's devices, or the keys seen lately.",
    )
    seen_days = forms.IntegerField(
        required=False, initial=7, help_text="Days a key counts as seen (1-30)."
    )
    value = _expression("Value", "An expression shown with each transition, e.g. payload.temp.", 1)
    severity = forms.ChoiceField(choices=[(s, s) for s in SEVERITIES], initial="major")
    notifications = JsonField(
        empty="[]",
        required=False,
        help_text='A JSON list: {"kind": "webhook"|"email"|"republish", "target": a URL, an '
        'address or a topic, "on": ["raise", "acknowledge", "clear"]}.',
    )
    renotify_seconds = forms.IntegerField(
        label="Notify again every (seconds)",
        required=False,
        min_value=0,
        max_value=MAX_SECONDS,
        help_text="While active and not acknowledged; at least 60. Empty: never.",
    )
    enabled = forms.BooleanField(
        required=False, help_text="Off by default: try the alarm on history first."
    )

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if editing:  # the name is the definition's address; it does not change
            self.fields["name"].disabled = True

    def clean(self):
        data = super().clean()
        defaults = alarm_definition_defaults()
        for field in DEFAULTED:
            if data.get(field) in (None, ""):
                data[field] = defaults[field]
        return data
