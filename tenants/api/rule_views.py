"""REST API of rules: `/rules` (list, create, read, change, delete; webhook secrets shown only to
members who can write), a rule's dead letters (list, clear, replay) and the dry run
(`/rules/test`). Runs over history are `rule_run_views`, a rule's sinks `sink_views`."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response

from tenants.api import rule_serializers as s
from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated, text_param, validated
from tenants.rules import selectors as rule_selectors
from tenants.rules import services as rule_services


class RuleAPIView(TenantAPIView):
    @property
    def rule_context(self) -> dict:
        # Webhook secrets sign requests: shown to members who can write, hidden from viewers.
        return {"show_secrets": self.membership.can_write}


class RuleListView(RuleAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("name", str, description="filter: name contains"),
            *PAGE_PARAMETERS,
        ],
        responses=page_of(s.RuleOutput),
        operation_id="v1_rules_list",
    )
    def get(self, request):
        rules = rule_selectors.rules_list(tenant=self.tenant, name=text_param(request, "name"))
        return paginated(self, request, rules, s.RuleOutput, self.rule_context)

    @extend_schema(
        request=s.RuleInput,
        responses={201: s.RuleOutput},
        examples=[
            OpenApiExample(
                "alert on heat",
                request_only=True,
                value={
                    "name": "hot",
                    "sql": 'SELECT payload.temp AS t, clientid FROM "sensors/+/temp" '
                    "WHERE payload.temp > 30",
                    "actions": [
                        {"type": "republish", "topic": "alerts/${clientid}", "qos": 1},
                        {"type": "webhook", "url": "https://example.com/hook"},
                        {"type": "dataset", "name": "hot-readings"},
                    ],
                },
            )
        ],
    )
    def post(self, request):
        data = validated(s.RuleInput, request.data)
        rule = rule_services.rule_create(tenant=self.tenant, **data)
        body = s.RuleOutput(rule, context=self.rule_context).data
        return Response(body, status=status.HTTP_201_CREATED)


class RuleDetailView(RuleAPIView):
    @extend_schema(responses=s.RuleOutput)
    def get(self, request, name: str):
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        return Response(s.RuleOutput(rule, context=self.rule_context).data)

    @extend_schema(request=s.RuleUpdateInput, responses=s.RuleOutput)
    def patch(self, request, name: str):
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        data = validated(s.RuleUpdateInput, request.data)
        rule_services.rule_update(rule, **data)
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        return Response(s.RuleOutput(rule, context=self.rule_context).data)

    @extend_schema(responses={204: None})
    def delete(self, request, name: str):
        rule_services.rule_delete(rule_selectors.rule_get(tenant=self.tenant, name=name))
        return Response(status=status.HTTP_204_NO_CONTENT)


class RuleDeadLettersView(TenantAPIView):
    """Action outputs that failed after every retry, newest first."""

    @extend_schema(responses=s.RuleDeadLetterOutput(many=True))
    def get(self, request, name: str):
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        letters = rule_selectors.rule_dead_letters_list(rule=rule)
        return paginated(self, request, letters, s.RuleDeadLetterOutput)

    @extend_schema(responses={204: None}, description="Clear the rule's dead letters.")
    def delete(self, request, name: str):
        rule_services.rule_dead_letters_clear(
            rule_selectors.rule_get(tenant=self.tenant, name=name)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class RuleDeadLettersReplayView(TenantAPIView):
    """Re-send the rule's webhook dead letters through the same webhook action."""

    @extend_schema(
        request=None,
        responses={200: s.DeadLetterReplayOutput, 429: OpenApiTypes.OBJECT},
        description=(
            "Re-sends up to 100 of the rule's webhook dead letters (oldest first), signed with "
            "the secret the rule's webhook has now. Delivered letters are deleted; the rest stay "
            "with their error. Call again while `remaining` is not 0. A tenant may replay 6 "
            "times a minute (all its rules together): more is a 429 with Retry-After."
        ),
    )
    def post(self, request, name: str):
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        try:
            return Response(rule_services.rule_dead_letters_replay(rule))
        except rule_services.ReplayThrottled as exc:
            raise exceptions.Throttled(wait=exc.wait, detail=str(exc)) from None


_ERROR_EXAMPLE = {
    "error": {
        "code": "invalid",
        "message": "sql: Unexpected token 'FORM' (line 1, column 10)",
        "fields": {"sql": ["Unexpected token 'FORM' (line 1, column 10)"]},
        "line": 1,
        "column": 10,
    }
}


class RuleTestView(TenantAPIView):
    """Dry run: one sample message through the rule, with the jobs' own compiled semantics."""

    post_is_read = True

    @extend_schema(
        operation_id="rules_test",
        summary="Dry-run rule SQL on a sample message",
        description=(
            "Evaluates `sql` on the message in `context` (missing fields get example values: "
            'topic `t/a`, payload `{"msg": "hello"}`, qos 1, clientid `c_emqx`, username '
            '`u_emqx`, timestamp now). Answers `{"match": true, "outputs": [...]}` (one '
            'object for SELECT, 0..n for FOREACH) or `{"match": false}`; a SQL error is a 400 '
            "with its `line` and `column`. Nothing is stored or published. The rule runs "
            "under the jobs' budget per message (time, outputs, sizes: docs/rules.md); over "
            "it, a 400 `rule exceeded its budget (…)`."
        ),
        request=s.RuleTestInput,
        responses={200: s.RuleTestOutput, 400: OpenApiTypes.OBJECT},
        examples=[
            OpenApiExample(
                "SELECT with a JSON path",
                request_only=True,
                value={
                    "sql": 'SELECT payload.temp AS t, topic(2) AS room FROM "sensors/+/temp" '
                    "WHERE payload.temp > 30",
                    "context": {
                        "topic": "sensors/kitchen/temp",
                        "payload": '{"temp": 31.5}',
                        "qos": 1,
                        "clientid": "dev-1",
                        "username": "acme/dev-1",
                        "user_properties": {"unit": "C"},
                    },
                },
            ),
            OpenApiExample(
                "FOREACH over an array",
                request_only=True,
                value={
                    "sql": "FOREACH payload.sensors AS s DO s.name AS name, s.value AS v "
                    'FROM "t/#"',
                    "context": {
                        "topic": "t/1",
                        "payload": '{"sensors": [{"name": "a", "value": 1}, '
                        '{"name": "b", "value": 2}]}',
                    },
                },
            ),
            OpenApiExample(
                "match",
                response_only=True,
                status_codes=["200"],
                value={"match": True, "outputs": [{"t": 31.5, "room": "kitchen"}]},
            ),
            OpenApiExample(
                "no match", response_only=True, status_codes=["200"], value={"match": False}
            ),
            OpenApiExample(
                "syntax error", response_only=True, status_codes=["400"], value=_ERROR_EXAMPLE
            ),
        ],
    )
    def post(self, request):
        data = validated(s.RuleTestInput, request.data)
        return Response(
            rule_services.rule_dry_run(
                sql=data["sql"], context=dict(data["context"]), tenant=self.tenant
            )
        )
