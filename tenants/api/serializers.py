"""Input and output serializers, one pair per API. Inputs only validate shapes; the services
validate meaning (and answer with messages the error handler turns into 400s)."""

from __future__ import annotations

from rest_framework import serializers

from tenants.models import QUOTA_KEYS


class StrictInput(serializers.Serializer):
    """Unknown fields are an error, not silently ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
        return super().to_internal_value(data)


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


class SignupOutput(serializers.Serializer):
    tenant = TenantOutput()
    token = serializers.CharField()
    user = serializers.DictField(child=serializers.CharField())


class TokenInput(StrictInput):
    email = serializers.CharField(max_length=254)
    password = serializers.CharField(max_length=128)
    tenant = serializers.CharField(max_length=64, required=False)


class TokenOutput(serializers.Serializer):
    token = serializers.CharField()
    tenant = serializers.CharField()


class CurrentTenantOutput(TenantOutput):
    role = serializers.CharField()


class TenantSettingsInput(StrictInput):
    name = serializers.CharField(max_length=128, required=False)
    acl_default = serializers.ChoiceField(choices=["allow", "deny"], required=False)
    archive_enabled = serializers.BooleanField(required=False)
    queue_qos0_offline = serializers.BooleanField(required=False)


class ApiTokenInput(StrictInput):
    name = serializers.CharField(max_length=64, required=False, default="default")


class ApiTokenOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
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


class DeviceCreatedOutput(DeviceOutput):
    password = serializers.CharField(help_text="the device secret: shown once, never again")


class CredentialRotateInput(StrictInput):
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class CredentialOutput(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    active = serializers.BooleanField(source="is_active")


class CredentialCreatedOutput(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    password = serializers.CharField(help_text="shown once, never again")
    expires_at = serializers.DateTimeField(allow_null=True)


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


# -- rules ----------------------------------------------------------------------------------


class RuleInput(StrictInput):
    name = serializers.CharField(max_length=64)
    sql = serializers.CharField()
    actions = serializers.ListField(child=serializers.DictField(), required=False, default=list)
    enabled = serializers.BooleanField(required=False, default=True)


class RuleUpdateInput(StrictInput):
    sql = serializers.CharField(required=False)
    actions = serializers.ListField(child=serializers.DictField(), required=False)
    enabled = serializers.BooleanField(required=False)


class RuleOutput(serializers.Serializer):
    name = serializers.CharField()
    sql = serializers.CharField()
    actions = serializers.ListField(child=serializers.DictField())
    enabled = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


# -- quota, usage, invoices -----------------------------------------------------------------


class QuotaOutput(serializers.Serializer):
    plan = serializers.CharField()
    limits = serializers.DictField(child=serializers.IntegerField())
    overrides = serializers.DictField(child=serializers.IntegerField())
    keys = serializers.ListField(child=serializers.CharField(), default=list(QUOTA_KEYS))


class UsageOutput(serializers.Serializer):
    minute = serializers.DateTimeField()
    connection_seconds = serializers.IntegerField()
    messages_in = serializers.IntegerField()
    messages_out = serializers.IntegerField()
    bytes_in = serializers.IntegerField()
    bytes_out = serializers.IntegerField()
    dropped = serializers.DictField()
    retained_count = serializers.IntegerField()
    stored_bytes = serializers.IntegerField()


class InvoiceOutput(serializers.Serializer):
    period = serializers.CharField()
    status = serializers.CharField()
    currency = serializers.CharField()
    total_cents = serializers.IntegerField()
    line_items = serializers.ListField()
    created_at = serializers.DateTimeField()
