"""An alarm tried over a range of the tenant's history before it is switched on
(`POST /api/v1/alarms/{name}/preview`): `common.alarms.preview` over the tenant's archive — the
definition's rule and each key's machine, the code the live job runs — within seconds, nothing
stored or notified. Bounded like a rule's preview: a range of at most `ALARM_PREVIEW_MAX_DAYS`
(7), `ALARM_PREVIEW_SECONDS` (10) of evaluation, `RULE_PREVIEW_RATE` previews a tenant may ask
(rules' and alarms' counted apart)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError

from common.stores.postgres_text import utf8_value
from tenants.alarms.services import alarm_spec
from tenants.models.alarms import AlarmDefinition
from tenants.rules.runs.services import preview_allowed, preview_range, setting_number


def alarm_preview(
    *, definition: AlarmDefinition, start: datetime, end: datetime, store: Any = None
) -> dict[str, Any]:
    """How often the alarm would have raised over [start, end), for which keys, how long each
    stayed active, and the first transitions (`common.alarms.preview.AlarmPreview`)."""
    from common.alarms.preview import preview
    from common.rule_preview.scan import PreviewTooLong
    from common.stores.object_store import open_object_store
    from tenants.models import Device

    start, end = preview_range(start, end, setting_number("ALARM_PREVIEW_MAX_DAYS", 7))
    preview_allowed("alarm-preview", definition.tenant_id)
    devices: list[str] = []
    if definition.no_data_seconds and definition.no_data_keys == "devices":
        devices = list(
            Device.objects.filter(tenant_id=definition.tenant_id).values_list("name", flat=True)
        )
    try:
        result = preview(
            store or open_object_store(),
            definition.tenant.slug,
            alarm_spec(definition),
            start,
            end,
            devices=devices,
            seconds=setting_number("ALARM_PREVIEW_SECONDS", 10.0),
        )
    except PreviewTooLong as exc:
        raise ValidationError({"from": [str(exc)]}) from None
    # a value from a payload may hold a lone surrogate, which no JSON response encodes
    return {"from": start, "to": end, **utf8_value(result.as_dict())}
