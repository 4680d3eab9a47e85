"""The REST API's serializers of devices and their secrets (`device_views`)."""

from __future__ import annotations

from rest_framework import serializers

from tenants.api.serializers import StrictInput
from tenants.devices import disconnect_reasons


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
