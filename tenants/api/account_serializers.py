"""The REST API's serializers of accounts and the tenant itself: sign-up, the login token, the
tenant and its settings, API tokens (`account_views`)."""

from __future__ import annotations

from rest_framework import serializers

from tenants.api.serializers import StrictInput


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
