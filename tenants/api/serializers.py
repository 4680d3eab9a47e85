"""Input and output serializers, one pair per API. Inputs only validate shapes; the services
validate meaning (and answer with messages the error handler turns into 400s).

This module holds what every serializer module builds on: `StrictInput` (unknown fields are an
error) and `RangeInput` (a range of history). The serializers live by sub-domain beside it:
`account_serializers`, `device_serializers`, `acl_serializers`, `rule_serializers`,
`usage_serializers`, `billing_serializers`, `alarm_serializers`; smaller APIs keep theirs in their
views module."""

from __future__ import annotations

from rest_framework import serializers


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
