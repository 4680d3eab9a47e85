"""Portal forms: they check input shapes; the services check meaning."""

import json

from django import forms


def parse_json(text: str):
    """`text` as JSON, or a form error naming where it stops being JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            f"Not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
        ) from None


class SignupForm(forms.Form):
    tenant = forms.CharField(
        label="Tenant name",
        max_length=32,
        help_text="3-32 lowercase letters, digits and hyphens; part of every device username.",
    )
    email = forms.EmailField()
    password = forms.CharField(widget=forms.PasswordInput, min_length=8)


class LoginForm(forms.Form):
    email = forms.EmailField()
    password = forms.CharField(widget=forms.PasswordInput)


class DeviceForm(forms.Form):
    name = forms.CharField(max_length=64, help_text="Letters, digits, '_', '.', ':' or '-'.")
    client_id_policy = forms.ChoiceField(
        label="Client ids",
        choices=[
            ("exact", "exact: client id = device name"),
            ("any", "any client id"),
            ("pattern", "matching a pattern"),
        ],
        initial="exact",
    )
    client_id_pattern = forms.CharField(
        label="Pattern (glob: * any run, ? one character)", required=False, max_length=255
    )


class AclForm(forms.Form):
    device = forms.ChoiceField(required=False, help_text="Empty: applies to every device.")
    action = forms.ChoiceField(
        choices=[
            ("both", "publish + subscribe"),
            ("publish", "publish"),
            ("subscribe", "subscribe"),
        ]
    )
    permission = forms.ChoiceField(choices=[("allow", "allow"), ("deny", "deny")])
    topic = forms.CharField(max_length=512, help_text="Filter; ${tenant} and ${client} expand.")

    def __init__(self, *args, devices=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["device"].choices = [("", "all devices")] + [(d, d) for d in devices]


class TokenForm(forms.Form):
    name = forms.CharField(max_length=64, initial="default")


class RuleForm(forms.Form):
    """A rule as the editor posts it; the SQL and the actions' meaning are the service's check."""

    name = forms.CharField(max_length=64, help_text="Letters, digits, '_', '.', ':' or '-'.")
    sql = forms.CharField(
        label="SQL",
        max_length=20_000,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "code"}),
        help_text='EMQX rule SQL, e.g. SELECT payload.temp AS t FROM "sensors/+/temp".',
    )
    actions = forms.CharField(
        required=False,
        initial="[]",
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false", "class": "code"}),
        help_text='A JSON list: {"type": "republish", "topic": "alerts/${clientid}"}, '
        '{"type": "webhook", "url": "https://…"}, {"type": "dataset", "name": "slug"}, and the '
        'sinks: {"type": "s3", "bucket": "…", "access_key_id": "…", "secret_access_key": "…"}, '
        '{"type": "sqs", "queue_url": "https://…"}, {"type": "kinesis", "stream": "…", '
        '"partition_key": "${clientid}"}, {"type": "postgres", "dsn": "postgresql://…", '
        '"table": "…", "columns": {"device": "${clientid}"}}, {"type": "mqtt_bridge", "host": '
        '"…", "port": 8883, "tls": true, "topic": "…"}, {"type": "http_batch", "url": '
        '"https://…"}. Saved credentials show as ********: leave them so to keep them.',
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if editing:  # the name is the rule's address; it does not change
            self.fields["name"].disabled = True

    def clean_actions(self):
        return parse_json(self.cleaned_data["actions"].strip() or "[]")


class InviteForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(
        choices=[
            ("viewer", "viewer: reads everything, changes nothing"),
            ("admin", "admin: manages devices, ACLs, rules and members"),
            ("owner", "owner: everything, including owners"),
        ],
        initial="viewer",
    )

    def __init__(self, *args, offer_owner: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        if not offer_owner:  # only owners make owners (the service refuses a forged choice)
            self.fields["role"].widget.choices = [
                c for c in self.fields["role"].choices if c[0] != "owner"
            ]


class PasswordChoiceForm(forms.Form):
    password = forms.CharField(widget=forms.PasswordInput, min_length=8, label="Choose a password")


class HistoryPolicyForm(forms.Form):
    topic_filter = forms.CharField(
        max_length=256,
        strip=False,
        help_text="An MQTT topic filter: + matches one level, # the rest (sensors/+/temperature).",
        widget=forms.TextInput(attrs={"class": "code", "placeholder": "sensors/#"}),
    )
    days = forms.IntegerField(min_value=1, help_text="How many days its messages are kept.")
