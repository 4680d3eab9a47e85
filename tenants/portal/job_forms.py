"""Portal forms of jobs, device groups and fleet provisioning. They only turn the posted text
into the values the REST API takes (JSON parsed, numbers read, names listed); what those values
may be is `jobs.services`' and `fleet.services`' check, the same the REST API gets, so a bad value is
refused in the same words through either door."""

from __future__ import annotations

import json

from django import forms

from tenants.portal.forms import parse_json

FAILURE_TYPES = [("FAILED", "FAILED"), ("REJECTED", "REJECTED"), ("TIMED_OUT", "TIMED_OUT")]
FAILURE_TYPES.append(("ALL", "any of them"))


class JsonField(forms.CharField):
    """JSON text in a textarea; a parse error names its line and column."""

    def __init__(self, *, empty: str = "", rows: int = 6, **kwargs) -> None:
        self.empty = empty  # what an empty box means ("" keeps it required)
        kwargs.setdefault("strip", False)
        widget = forms.Textarea(attrs={"rows": rows, "spellcheck": "false", "class": "code"})
        super().__init__(widget=widget, **kwargs)

    def to_python(self, value):
        text = (super().to_python(value) or "").strip() or self.empty
        if not text:
            if self.required:
                raise forms.ValidationError(self.error_messages["required"], code="required")
            return None
        return parse_json(text)

    def validate(self, value) -> None:
        """Emptiness was judged on the text: `null` is JSON, for the service to refuse."""

    def prepare_value(self, value):
        return value if isinstance(value, str) or value is None else json.dumps(value, indent=2)


class NamesField(forms.MultipleChoiceField):
    """Names picked from a list (the tenant's devices or groups). A name not in the list goes
    through to the service, which says which names it does not know, as the REST API does."""

    def __init__(self, *, size: int = 6, **kwargs) -> None:
        kwargs.setdefault("required", False)
        super().__init__(widget=forms.SelectMultiple(attrs={"size": size}), **kwargs)

    def valid_value(self, value) -> bool:
        return True


class JobForm(forms.Form):
    """AWS's CreateJob as `POST /api/v1/jobs` takes it, with one abort criterion."""

    job_id = forms.CharField(
        label="Job id",
        max_length=64,
        help_text="1-64 letters, digits, '_' or '-'; the id your devices see.",
    )
    description = forms.CharField(required=False, max_length=2028)
    document = JsonField(
        label="Job document (JSON)",
        rows=8,
        help_text="A JSON object of at most 32 KiB: what each device fetches and acts on.",
    )
    devices = NamesField(help_text="Ctrl/⌘-click to pick several.")
    groups = NamesField(size=4, help_text="Every member of each group (as it is now) gets it.")
    rollout_per_minute = forms.IntegerField(
        label="Rollout: devices per minute",
        required=False,
        help_text="1-1000 new executions a minute; empty: every device at once.",
    )
    abort_failure_type = forms.ChoiceField(
        label="Abort when executions end",
        required=False,
        choices=[("", "never abort"), *FAILURE_TYPES],
    )
    abort_threshold = forms.FloatField(
        label="…in this share of the executed devices (%)",
        required=False,
        help_text="Above 0, up to 100: the job is cancelled once it is reached.",
    )
    abort_min_executed = forms.IntegerField(
        label="…once at least this many devices executed",
        required=False,
        initial=1,
    )
    timeout_minutes = forms.IntegerField(
        label="In-progress timeout (minutes)",
        required=False,
        help_text="1-10080: an execution IN_PROGRESS this long becomes TIMED_OUT; empty: none.",
    )

    def __init__(self, *args, devices=(), groups=(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["devices"].choices = [(name, name) for name in devices]
        self.fields["groups"].choices = [(name, name) for name in groups]

    def abort_criteria(self) -> list[dict] | None:
        """The criterion as the service takes it (None when the form names none)."""
        data = self.cleaned_data
        if not data["abort_failure_type"] and data["abort_threshold"] is None:
            return None
        minimum = data["abort_min_executed"]
        return [
            {
                "failure_type": data["abort_failure_type"],
                "threshold_percentage": data["abort_threshold"],
                "min_executed_things": 1 if minimum is None else minimum,
            }
        ]


class GroupForm(forms.Form):
    name = forms.CharField(max_length=128, help_text="Letters, digits, '_', '.', ':' or '-'.")
    devices = NamesField(help_text="Optional: add members later too.")

    def __init__(self, *args, devices=(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["devices"].choices = [(name, name) for name in devices]


class GroupMembersForm(forms.Form):
    devices = NamesField(required=True)

    def __init__(self, *args, devices=(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["devices"].choices = [(name, name) for name in devices]


class TemplateForm(forms.Form):
    """A provisioning template as `POST /api/v1/provisioning-templates` takes it."""

    name = forms.CharField(max_length=64, help_text="Letters, digits, '_', '.', ':' or '-'.")
    device_name_template = forms.CharField(
        label="Device name",
        max_length=128,
        help_text="From the device's parameters, e.g. sensor-{SerialNumber}.",
        widget=forms.TextInput(attrs={"class": "code", "placeholder": "sensor-{SerialNumber}"}),
    )
    acl_rules = JsonField(
        label="ACL rules for the new device (JSON)",
        empty="[]",
        required=False,
        help_text='A list: {"action": "both", "permission": "allow", "topic": '
        '"sensors/${client}/#"} (action publish, subscribe or both; ${client} is its name).',
    )
    attributes = JsonField(
        label="Attributes (JSON)",
        empty="{}",
        required=False,
        rows=3,
        help_text="An object given to each new device.",
    )
    pre_provisioning_hook_url = forms.URLField(
        label="Pre-provisioning webhook",
        max_length=512,
        required=False,
        assume_scheme="https",
        help_text="Optional: asked before each device is made; anything but a 2xx refuses.",
    )
    enabled = forms.BooleanField(required=False, initial=True)
    groups = NamesField(
        size=4, help_text="Device groups each new device joins (Ctrl/⌘-click to pick several)."
    )

    def __init__(self, *args, groups=(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["groups"].choices = [(name, name) for name in groups]


class TemplateGroupsForm(forms.Form):
    """The groups a template's new devices join, as `PATCH …/provisioning-templates/{name}`
    takes them (none picked: they join none)."""

    groups = NamesField(size=6, help_text="Devices made from now on join these.")

    def __init__(self, *args, groups=(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["groups"].choices = [(name, name) for name in groups]
