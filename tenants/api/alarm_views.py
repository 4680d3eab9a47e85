"""REST API of the tenant's alarms (issue 46). Thin: `tenants.alarms.selectors` reads,
`tenants.alarms.services` writes; another tenant's alarm, by name or by id, is a 404 as a
missing one is.

Paths (CONTRACT.md's first): definitions at `/api/v1/alarms` and `/api/v1/alarms/{name}` (also
`/api/v1/alarm-definitions[/{name}]`); states at `/api/v1/alarms/states`, one by id at
`/api/v1/alarms/states/{id}` or by alarm and key at `/api/v1/alarms/{name}/states/{key}`, each
with `/acknowledge` and `/history`; a key's history across alarms at
`/api/v1/alarms/history?device=KEY`.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from common.alarms.definition import SEVERITIES
from common.alarms.machine import STATES
from tenants.alarms import selectors as alarm_selectors
from tenants.alarms import services as alarm_services
from tenants.alarms.preview import alarm_preview
from tenants.alarms.services import EDITABLE
from tenants.api import alarm_serializers as s
from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated, text_param, validated
from tenants.rules.runs.services import PreviewThrottled


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "Conflict."


class AlarmAPIView(TenantAPIView):
    @property
    def output_context(self) -> dict:
        # Webhook secrets sign notifications: shown to members who can write, hidden from viewers.
        return {"show_secrets": self.membership.can_write}

    def definition_body(self, definition) -> dict:
        return s.AlarmDefinitionOutput(definition, context=self.output_context).data


def _choice_param(request, name: str, choices: tuple[str, ...]) -> str | None:
    value = text_param(request, name)
    if value and value not in choices:
        raise ValidationError({name: [f"Must be one of {', '.join(choices)}."]})
    return value or None


STATE_FILTERS = [
    OpenApiParameter("state", OpenApiTypes.STR, enum=list(STATES), description="only this state"),
    OpenApiParameter(
        "severity", OpenApiTypes.STR, enum=list(SEVERITIES), description="the alarm's severity"
    ),
    OpenApiParameter("device", OpenApiTypes.STR, description="the key (a device's client id)"),
    OpenApiParameter("alarm", OpenApiTypes.STR, description="the alarm's name"),
]
DEVICE = OpenApiParameter(
    "device", OpenApiTypes.STR, required=True, description="the key (a device's client id)"
)


# -- definitions ----------------------------------------------------------------------------------


class AlarmDefinitionListView(AlarmAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(s.AlarmDefinitionOutput),
        operation_id="v1_alarms_list",
    )
    def get(self, request):
        rows = alarm_selectors.alarm_definitions_list(tenant=self.tenant)
        return paginated(self, request, rows, s.AlarmDefinitionOutput, self.output_context)

    @extend_schema(
        request=s.AlarmDefinitionInput,
        responses={201: s.AlarmDefinitionOutput},
        operation_id="v1_alarms_create",
    )
    def post(self, request):
        data = validated(s.AlarmDefinitionInput, request.data)
        definition = alarm_services.alarm_definition_create(tenant=self.tenant, **data)
        return Response(self.definition_body(definition), status=status.HTTP_201_CREATED)


class AlarmDefinitionDetailView(AlarmAPIView):
    @extend_schema(responses=s.AlarmDefinitionOutput, operation_id="v1_alarms_retrieve")
    def get(self, request, name: str):
        definition = alarm_selectors.alarm_definition_get(tenant=self.tenant, name=name)
        return Response(self.definition_body(definition))

    @extend_schema(
        request=s.AlarmDefinitionChangeInput,
        responses=s.AlarmDefinitionOutput,
        operation_id="v1_alarms_replace",
    )
    def put(self, request, name: str):
        definition = alarm_selectors.alarm_definition_get(tenant=self.tenant, name=name)
        data = validated(s.AlarmDefinitionChangeInput, request.data)
        fresh = alarm_services.alarm_definition_defaults()
        fields = {field: data.get(field, fresh[field]) for field in EDITABLE}
        definition = alarm_services.alarm_definition_update(definition, **fields)
        return Response(self.definition_body(definition))

    @extend_schema(
        request=s.AlarmDefinitionChangeInput,
        responses=s.AlarmDefinitionOutput,
        operation_id="v1_alarms_update",
    )
    def patch(self, request, name: str):
        definition = alarm_selectors.alarm_definition_get(tenant=self.tenant, name=name)
        serializer = s.AlarmDefinitionChangeInput(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        definition = alarm_services.alarm_definition_update(definition, **serializer.validated_data)
        return Response(self.definition_body(definition))

    @extend_schema(responses={204: None}, operation_id="v1_alarms_destroy")
    def delete(self, request, name: str):
        alarm_services.alarm_definition_delete(
            alarm_selectors.alarm_definition_get(tenant=self.tenant, name=name)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(exclude=True)  # the same operations as /api/v1/alarms, documented there
class AlarmDefinitionListAlias(AlarmDefinitionListView):
    """`/api/v1/alarm-definitions`."""


@extend_schema(exclude=True)
class AlarmDefinitionDetailAlias(AlarmDefinitionDetailView):
    """`/api/v1/alarm-definitions/{name}`."""


# -- states ---------------------------------------------------------------------------------------


class AlarmStateListView(AlarmAPIView):
    @extend_schema(
        parameters=[*STATE_FILTERS, *PAGE_PARAMETERS],
        responses=page_of(s.AlarmStateOutput),
        operation_id="v1_alarm_states_list",
    )
    def get(self, request):
        rows = alarm_selectors.alarm_states_list(
            tenant=self.tenant,
            state=_choice_param(request, "state", STATES),
            severity=_choice_param(request, "severity", SEVERITIES),
            device=text_param(request, "device"),
            alarm=text_param(request, "alarm"),
        )
        return paginated(self, request, rows, s.AlarmStateOutput)


class AlarmStateMixin:
    """The state a path names: by id (`state_id`), or by alarm and key (`name`, `key`)."""

    def state(self, kwargs):
        if "state_id" in kwargs:
            return alarm_selectors.alarm_state_get(tenant=self.tenant, state_id=kwargs["state_id"])
        return alarm_selectors.alarm_state_by_key(
            tenant=self.tenant, name=kwargs["name"], key=kwargs["key"]
        )


class AlarmStateDetailView(AlarmStateMixin, AlarmAPIView):
    @extend_schema(responses=s.AlarmStateOutput)
    def get(self, request, **kwargs):
        return Response(s.AlarmStateOutput(self.state(kwargs)).data)


class AlarmAcknowledgeView(AlarmStateMixin, AlarmAPIView):
    @extend_schema(
        request=s.AcknowledgeInput,
        responses={200: s.AlarmStateOutput, 409: OpenApiTypes.OBJECT},
    )
    def post(self, request, **kwargs):
        note = validated(s.AcknowledgeInput, request.data)["note"]
        state = self.state(kwargs)
        try:
            state = alarm_services.alarm_acknowledge(state, by=request.user.email, note=note)
        except alarm_services.AlarmNotActive as refusal:
            conflict = Conflict(str(refusal))
            conflict.extra = {"state": refusal.status}
            raise conflict from None
        return Response(s.AlarmStateOutput(state).data)


class AlarmKeyHistoryView(AlarmStateMixin, AlarmAPIView):
    @extend_schema(parameters=PAGE_PARAMETERS, responses=page_of(s.AlarmTransitionOutput))
    def get(self, request, **kwargs):
        rows = alarm_selectors.alarm_key_history(tenant=self.tenant, state=self.state(kwargs))
        return paginated(self, request, rows, s.AlarmTransitionOutput)


# The same operations by alarm name and key (CONTRACT.md's paths), each with an id of its own.
class AlarmStateByKeyView(AlarmStateDetailView):
    @extend_schema(responses=s.AlarmStateOutput, operation_id="v1_alarm_key_retrieve")
    def get(self, request, name: str, key: str):
        return super().get(request, name=name, key=key)


class AlarmAcknowledgeByKeyView(AlarmAcknowledgeView):
    @extend_schema(
        request=s.AcknowledgeInput,
        responses={200: s.AlarmStateOutput, 409: OpenApiTypes.OBJECT},
        operation_id="v1_alarm_key_acknowledge",
    )
    def post(self, request, name: str, key: str):
        return super().post(request, name=name, key=key)


class AlarmKeyHistoryByKeyView(AlarmKeyHistoryView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(s.AlarmTransitionOutput),
        operation_id="v1_alarm_key_history",
    )
    def get(self, request, name: str, key: str):
        return super().get(request, name=name, key=key)


class AlarmDeviceHistoryView(AlarmAPIView):
    @extend_schema(
        parameters=[DEVICE, *PAGE_PARAMETERS],
        responses=page_of(s.AlarmTransitionOutput),
        operation_id="v1_alarm_history_list",
    )
    def get(self, request):
        device = text_param(request, "device")
        if not device:
            raise ValidationError({"device": ["Give the key (a device's client id)."]})
        rows = alarm_selectors.alarm_device_history(tenant=self.tenant, device=device)
        return paginated(self, request, rows, s.AlarmTransitionOutput)


class AlarmPreviewView(AlarmAPIView):
    """An alarm over a range of history (any member; on or off): how often it would have
    raised, for which keys, for how long, and its first transitions. Nothing is stored."""

    @extend_schema(
        request=s.AlarmPreviewInput,
        responses={200: s.AlarmPreviewOutput, 400: OpenApiTypes.OBJECT, 429: OpenApiTypes.OBJECT},
        operation_id="v1_alarms_preview",
    )
    def post(self, request, name: str):
        definition = alarm_selectors.alarm_definition_get(tenant=self.tenant, name=name)
        data = validated(s.AlarmPreviewInput, request.data)
        try:
            body = alarm_preview(definition=definition, start=data["from"], end=data["to"])
        except PreviewThrottled as exc:
            raise exceptions.Throttled(wait=exc.wait, detail=str(exc)) from None
        return Response(s.AlarmPreviewOutput(body).data)
