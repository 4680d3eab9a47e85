"""The REST API's serializers of the ACL: its rules and the tester (`acl_views`)."""

from __future__ import annotations

from rest_framework import serializers

from tenants.api.serializers import StrictInput


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
