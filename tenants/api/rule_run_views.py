"""REST API for a rule over the tenant's history (issue 31): `POST /rules/{name}/runs` previews
(200) or starts a run (202), `GET /rules/{name}/runs[/{id}]` lists them and shows one's
progress, `POST /rules/{name}/runs/{id}/cancel` cancels it. Thin, as the others: the rule is
looked up in the caller's tenant, and runs only through it, so another tenant's rule names and
run ids are 404s."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.serializers import RangeInput
from tenants.api.views import TenantAPIView, paginated, validated
from tenants.models import RuleRun
from tenants.rules import selectors as rule_selectors
from tenants.rules.runs import selectors as run_selectors
from tenants.rules.runs import services as runs


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "Not in this state."

    def __init__(self, detail: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.extra = extra or {}


class RuleRunInput(RangeInput):
    mode = serializers.ChoiceField(
        choices=["preview", "run"],
        default="preview",
        help_text="preview: counts and the first outputs, now (200); run: on Spark (202)",
    )
    actions = serializers.ChoiceField(
        choices=list(RuleRun.Actions.values),
        default=RuleRun.Actions.NEW_ONLY,
        help_text="run: which actions fire. all; none (outputs counted, nothing fired); "
        "new-only (none already done for the same message and rule version, live or in an "
        "earlier run)",
    )
    action = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="run: only this action of the rule fires (its place in the rule's actions, "
        "from 1), e.g. a sink to re-send a range to; left out or null: every action",
    )


class RulePreviewOutput(serializers.Serializer):
    mode = serializers.CharField()
    to = serializers.DateTimeField(help_text="the range's end (no later than now)")
    read = serializers.IntegerField(help_text="archived messages of the tenant in the range")
    considered = serializers.IntegerField(help_text="of those, what the rule's FROM takes")
    matched = serializers.IntegerField(help_text="of those, what the rule matches")
    failed = serializers.IntegerField(help_text="of those, whose evaluation failed")
    unevaluated = serializers.IntegerField(help_text="not evaluated within the preview's time")
    complete = serializers.BooleanField(help_text="false: the counts stop short (`unevaluated`)")
    decided_natively = serializers.IntegerField(help_text="rows counted without the evaluator")
    outputs = serializers.ListField(
        child=serializers.JSONField(), help_text="the first outputs, in time order"
    )
    seconds = serializers.FloatField()

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField()
        return fields


class RuleRunOutput(serializers.Serializer):
    id = serializers.UUIDField()
    rule = serializers.CharField(source="rule.name")
    rule_version = serializers.IntegerField()
    to = serializers.DateTimeField(source="end")
    actions = serializers.CharField()
    action = serializers.IntegerField(
        source="only_action",
        allow_null=True,
        help_text="the only action of the rule that fires (from 1); null: every action",
    )
    state = serializers.ChoiceField(choices=list(RuleRun.State.values))
    progress = serializers.SerializerMethodField(help_text="0..1")
    read = serializers.IntegerField(help_text="archived messages of the tenant read so far")
    considered = serializers.IntegerField(help_text="of those, what the rule's FROM took")
    matched = serializers.IntegerField(help_text="of those, what the rule matched")
    failed = serializers.IntegerField(help_text="of those, whose evaluation failed")
    actions_fired = serializers.IntegerField(help_text="actions run (metered)")
    actions_failed = serializers.IntegerField(help_text="of those, failed (dead letters)")
    actions_skipped = serializers.IntegerField(
        help_text="actions not run: `none`, or done already (`new-only`)"
    )
    error = serializers.CharField()
    requested_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    cancel_requested_at = serializers.DateTimeField(allow_null=True)

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField(source="start")
        return fields

    def get_progress(self, run) -> float:
        return run_selectors.run_progress(run)


_DESCRIPTION = (
    "`mode: preview` (the default) answers at once (200) with how many archived messages of "
    "the tenant the range holds (`read`), how many the rule's FROM takes (`considered`), "
    "matches (`matched`, as the dry run's `match`) and fails on, and the first outputs: "
    "nothing is stored or fired; at most 7 days, 30 previews a minute per tenant (then 429). "
    "`mode: run` queues a run on Spark (202 with its `id` and `state`); follow it at "
    "`GET …/runs/{id}`, cancel it at `POST …/runs/{id}/cancel`. `actions`: `all`, `none` "
    "(outputs computed, nothing fired) or `new-only` (the default: no action already done for "
    "the same message and rule version, by the live job or an earlier run). `action`: only that "
    "action of the rule fires (its place among the rule's actions, from 1; others are counted "
    "in `actions_skipped`): a re-send of a range to one sink, with `new-only`; an action the "
    "rule does not have is a 400 on `action`. A run covers at "
    "most 31 days; one run of a rule at a time (else 409). Runs are metered like the live job "
    "(rules triggered, actions executed)."
)


class RuleRunsView(TenantAPIView):
    """A rule over the tenant's history: preview, or start a run; list the runs."""

    post_is_read = True  # a preview changes nothing; a run checks the role itself

    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(RuleRunOutput),
        operation_id="v1_rules_runs_list",
    )
    def get(self, request, name: str):
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        return paginated(self, request, run_selectors.runs_list(rule=rule), RuleRunOutput)

    @extend_schema(
        operation_id="v1_rules_runs_create",
        request=RuleRunInput,
        responses={
            200: RulePreviewOutput,
            202: RuleRunOutput,
            400: OpenApiTypes.OBJECT,
            409: OpenApiTypes.OBJECT,
            429: OpenApiTypes.OBJECT,
        },
        description=_DESCRIPTION,
        examples=[
            OpenApiExample(
                "preview a day",
                request_only=True,
                value={"from": "2026-11-26T00:00:00Z", "to": "2026-11-27T00:00:00Z"},
            ),
            OpenApiExample(
                "run it, firing only what was not done",
                request_only=True,
                value={
                    "from": "2026-11-26T00:00:00Z",
                    "to": "2026-11-27T00:00:00Z",
                    "mode": "run",
                    "actions": "new-only",
                },
            ),
            OpenApiExample(
                "re-send last week to the rule's second action (a sink)",
                request_only=True,
                value={
                    "from": "2026-11-19T00:00:00Z",
                    "to": "2026-11-26T00:00:00Z",
                    "mode": "run",
                    "actions": "new-only",
                    "action": 2,
                },
            ),
        ],
    )
    def post(self, request, name: str):
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        data = validated(RuleRunInput, request.data)
        if data["mode"] == "preview":
            try:
                body = runs.run_preview(rule=rule, start=data["from"], end=data["to"])
            except runs.PreviewThrottled as exc:
                raise exceptions.Throttled(wait=exc.wait, detail=str(exc)) from None
            return Response(RulePreviewOutput(body).data)
        if not self.membership.can_write:
            raise exceptions.PermissionDenied(
                f"Your role ({self.membership.role}) can preview but not run rules."
            )
        try:
            run = runs.run_start(
                rule=rule,
                start=data["from"],
                end=data["to"],
                actions=data["actions"],
                requested_by=getattr(request.user, "email", "") or "",
                only_action=data.get("action"),
            )
        except runs.RunConflict as exc:
            raise _conflict(exc) from None
        return Response(RuleRunOutput(run).data, status=status.HTTP_202_ACCEPTED)


def _conflict(exc: runs.RunConflict) -> Conflict:
    """The 409: its words, and the run that holds the rule with where to cancel it."""
    holder = exc.holder
    if holder is None:
        return Conflict(str(exc))
    path = f"/api/v1/rules/{holder.rule.name}/runs/{holder.id}"
    run = {"id": str(holder.id), "state": holder.state, "url": path, "cancel": f"{path}/cancel"}
    return Conflict(str(exc), {"run": run})


class RuleRunDetailView(TenantAPIView):
    @extend_schema(operation_id="v1_rules_runs_retrieve", responses=RuleRunOutput)
    def get(self, request, name: str, run_id: str):
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        return Response(RuleRunOutput(run_selectors.run_get(rule=rule, run_id=run_id)).data)


class RuleRunCancelView(TenantAPIView):
    @extend_schema(
        operation_id="v1_rules_runs_cancel",
        request=None,
        responses={202: RuleRunOutput, 409: OpenApiTypes.OBJECT},
        description="A queued run is cancelled at once; a running one stops at its next "
        "chunk of hours or group of actions, its Spark jobs under way cancelled (`state` "
        "becomes `cancelled` within seconds). What it did before stays done and metered. A "
        "run that ended already is a 409.",
    )
    def post(self, request, name: str, run_id: str):
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        run = run_selectors.run_get(rule=rule, run_id=run_id)
        try:
            run = runs.run_cancel(run)
        except runs.RunConflict as exc:
            raise Conflict(str(exc)) from None
        return Response(RuleRunOutput(run).data, status=status.HTTP_202_ACCEPTED)
