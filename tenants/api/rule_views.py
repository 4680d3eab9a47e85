"""REST API views: thin. They resolve the caller's tenant and role, validate the input shape, call
a service or selector, and serialize the result. Every object lookup goes through a selector
scoped to the caller's tenant, so another tenant's object is a 404."""

from __future__ import annotations

from datetime import UTC, timedelta

from django.contrib.auth import authenticate
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants.accounts import login_tokens
from tenants.accounts import selectors as account_selectors
from tenants.accounts import services as account_services
from tenants.accounts import trust as accounts
from tenants.accounts.throttles import LoginThrottle
from tenants.acls import selectors as acl_selectors
from tenants.acls import services as acl_services
from tenants.api import serializers as s
from tenants.api.pagination import PAGE_PARAMETERS, BoundedPagination, page_of
from tenants.billing import invoice_render
from tenants.billing import selectors as billing_selectors
from tenants.client_address import client_address
from tenants.devices import selectors as device_selectors
from tenants.devices import services as device_services
from tenants.models import ApiToken, Membership, Tenant
from tenants.rules import selectors as rule_selectors
from tenants.rules import services as rule_services
from tenants.tenant import selectors as tenant_selectors
from tenants.tenant import services as tenant_services
from tenants.usage import selectors as usage_selectors
from tenants.usage.throttling import figures as throttling_body
from tenants.usage.throttling import limit_activity

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
MAX_ID = 2**63 - 1  # bigint


class AuthThrottled:
    throttle_classes = [LoginThrottle]


class TenantAPIView(APIView):
    """Resolves `self.tenant` and `self.membership`; viewers may only read."""

    tenant: Tenant
    membership: Membership
    # A POST that changes nothing (the rule dry run) is open to viewers too.
    post_is_read = False

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if any(isinstance(v, int) and v > MAX_ID for v in kwargs.values()):
            raise Http404("No such object.")  # beyond any id: not a database error
        if isinstance(request.auth, ApiToken):
            tenant = request.auth.tenant
            membership = account_selectors.membership_get(request.user, tenant)
        else:
            membership = account_selectors.membership_first(
                request.user, request.headers.get("X-Tenant")
            )
            tenant = membership.tenant if membership else None
        if membership is None or tenant is None:
            raise exceptions.PermissionDenied("You are not a member of any tenant.")
        self.tenant, self.membership = tenant, membership
        reads = request.method in SAFE_METHODS or (request.method == "POST" and self.post_is_read)
        if not reads and not membership.can_write:
            raise exceptions.PermissionDenied(
                f"Your role ({membership.role}) can read but not change this tenant."
            )


def paginated(
    view: APIView, request, queryset, serializer_class, context: dict | None = None
) -> Response:
    paginator = BoundedPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    data = serializer_class(page, many=True, context=context or {}).data
    return paginator.get_paginated_response(data)


def text_param(request, name: str) -> str | None:
    """A query parameter as text, refused (400) when it holds characters no name can."""
    value = request.query_params.get(name)
    if value is not None and ("\x00" in value or len(value) > 256):
        raise ValidationError({name: ["Must be at most 256 characters, without NUL."]})
    return value


def validated(serializer_class, data):
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


# -- auth -----------------------------------------------------------------------------------


class SignupView(AuthThrottled, APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=s.SignupInput, responses={201: s.SignupOutput}, auth=[])
    def post(self, request):
        data = validated(s.SignupInput, request.data)
        tenant, user, token = account_services.signup(**data, address=client_address(request.META))
        # The new tenant is the account's own at once; anything else waits for the address to
        # be proved (tenants.accounts.trust): the link goes to it now.
        accounts.verification_mail_quietly(
            user, request.build_absolute_uri(accounts.verification_path(user))
        )
        body = {
            "tenant": s.TenantOutput(tenant).data,
            "token": token,
            "user": {"email": user.email, "email_verified": False},
        }
        return Response(body, status=status.HTTP_201_CREATED)


class TokenView(AuthThrottled, APIView):
    """The member's login token (`tenants.accounts.login_tokens`): the same one at every login, a new one
    with `rotate`."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def get_authenticate_header(self, request) -> str:
        # Wrong credentials are a 401 (DRF makes it a 403 for a view without authenticators).
        return 'Bearer realm="api"'

    @extend_schema(
        request=s.TokenInput,
        responses={200: s.TokenOutput, 401: OpenApiTypes.OBJECT},
        auth=[],
    )
    def post(self, request):
        data = validated(s.TokenInput, request.data)
        email = data["email"].strip().lower()
        user = authenticate(request, username=email, password=data["password"])
        if user is None:
            raise exceptions.AuthenticationFailed("Wrong email or password.")
        membership = account_selectors.membership_first(user, data.get("tenant"))
        if membership is None:
            raise ValidationError({"tenant": ["You are not a member of that tenant."]})
        token = login_tokens.login_token(user=user, tenant=membership.tenant, rotate=data["rotate"])
        accounts.login_address_remember(user, client_address(request.META))
        return Response({"token": token, "tenant": membership.tenant.slug})


class CurrentTenantView(TenantAPIView):
    @extend_schema(responses=s.CurrentTenantOutput)
    def get(self, request):
        data = dict(s.TenantOutput(self.tenant).data, role=self.membership.role)
        return Response(data)

    @extend_schema(request=s.TenantSettingsInput, responses=s.CurrentTenantOutput)
    def patch(self, request):
        settings = validated(s.TenantSettingsInput, request.data)
        tenant = tenant_services.tenant_update_settings(self.tenant, **settings)
        return Response(dict(s.TenantOutput(tenant).data, role=self.membership.role))


class ApiTokenListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(s.ApiTokenOutput),
        operation_id="v1_tokens_list",
    )
    def get(self, request):
        tokens = account_selectors.api_tokens_list(tenant=self.tenant, user=request.user)
        return paginated(self, request, tokens, s.ApiTokenOutput)

    @extend_schema(request=s.ApiTokenInput, responses={201: s.ApiTokenCreatedOutput})
    def post(self, request):
        data = validated(s.ApiTokenInput, request.data)
        token, raw = account_services.api_token_create(
            user=request.user, tenant=self.tenant, **data
        )
        body = dict(s.ApiTokenOutput(token).data, token=raw)
        return Response(body, status=status.HTTP_201_CREATED)


class ApiTokenDetailView(TenantAPIView):
    @extend_schema(responses={204: None})
    def delete(self, request, token_id: int):
        token = account_selectors.api_token_get(
            tenant=self.tenant, user=request.user, token_id=token_id
        )
        if token is None:
            raise Http404("No such token.")
        account_services.api_token_delete(token)
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- devices --------------------------------------------------------------------------------


class DeviceListView(TenantAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("name", str, description="filter: name contains"),
            *PAGE_PARAMETERS,
        ],
        responses=page_of(s.DeviceOutput),
        operation_id="v1_devices_list",
    )
    def get(self, request):
        devices = device_selectors.devices_list(
            tenant=self.tenant, name=text_param(request, "name")
        )
        return paginated(self, request, devices, s.DeviceOutput)

    @extend_schema(request=s.DeviceCreateInput, responses={201: s.DeviceCreatedOutput})
    def post(self, request):
        data = validated(s.DeviceCreateInput, request.data)
        device, secret = device_services.device_create(tenant=self.tenant, **data)
        body = dict(s.DeviceOutput(device).data, password=secret)
        return Response(body, status=status.HTTP_201_CREATED)


class DeviceDetailView(TenantAPIView):
    @extend_schema(responses=s.DeviceOutput)
    def get(self, request, name: str):
        return Response(
            s.DeviceOutput(device_selectors.device_get(tenant=self.tenant, name=name)).data
        )

    @extend_schema(request=s.DeviceUpdateInput, responses=s.DeviceOutput)
    def patch(self, request, name: str):
        device = device_selectors.device_get(tenant=self.tenant, name=name)
        data = validated(s.DeviceUpdateInput, request.data)
        return Response(s.DeviceOutput(device_services.device_update(device, **data)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, name: str):
        device_services.device_delete(device_selectors.device_get(tenant=self.tenant, name=name))
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeviceCredentialsView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(s.CredentialOutput),
        operation_id="v1_devices_credentials_list",
    )
    def get(self, request, name: str):
        device = device_selectors.device_get(tenant=self.tenant, name=name)
        return paginated(
            self, request, device_selectors.credentials_list(device=device), s.CredentialOutput
        )

    @extend_schema(request=s.CredentialRotateInput, responses={201: s.CredentialCreatedOutput})
    def post(self, request, name: str):
        device = device_selectors.device_get(tenant=self.tenant, name=name)
        data = validated(s.CredentialRotateInput, request.data)
        grace = timedelta(seconds=data.pop("grace_seconds"))
        credential, secret = device_services.credential_rotate(device, grace=grace, **data)
        body = {
            "id": credential.id,
            "username": device.username,
            "password": secret,
            "expires_at": credential.expires_at,
            "previous": device_selectors.credentials_unrevoked(device=device, besides=credential),
        }
        return Response(s.CredentialCreatedOutput(body).data, status=status.HTTP_201_CREATED)


class DeviceCredentialDetailView(TenantAPIView):
    @extend_schema(responses={204: None})
    def delete(self, request, name: str, credential_id: int):
        device = device_selectors.device_get(tenant=self.tenant, name=name)
        credential = device_selectors.credential_get(device=device, credential_id=credential_id)
        if credential is None:
            raise Http404("No such credential.")
        device_services.credential_revoke(credential)
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- ACLs -----------------------------------------------------------------------------------


class AclListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS, responses=page_of(s.AclOutput), operation_id="v1_acls_list"
    )
    def get(self, request):
        return paginated(
            self, request, acl_selectors.acl_rules_list(tenant=self.tenant), s.AclOutput
        )

    @extend_schema(request=s.AclInput, responses={201: s.AclOutput})
    def post(self, request):
        data = validated(s.AclInput, request.data)
        device_name = data.pop("device")
        device = None
        if device_name:
            try:
                device = device_selectors.device_get(tenant=self.tenant, name=device_name)
            except Http404:
                raise ValidationError({"device": [f"No device named {device_name!r}."]}) from None
        rule = acl_services.acl_add(tenant=self.tenant, device=device, **data)
        return Response(s.AclOutput(rule).data, status=status.HTTP_201_CREATED)


class AclTestView(TenantAPIView):
    @extend_schema(
        request=s.AclTestInput,
        responses=s.AclTestOutput,
        operation_id="v1_acls_test",
        summary="Test the ACL: may a device publish or subscribe to a topic?",
        description="Answers with the broker's own evaluation (`common.access.acl`) over the tenant's "
        "rules and default, and names the rule that decided. Another tenant's device is a 404.",
    )
    def post(self, request):
        data = validated(s.AclTestInput, request.data)
        acl_services.validate_acl_test_topic(data["action"], data["topic"])
        result = acl_selectors.acl_check(
            tenant=self.tenant,
            device_name=data["device"],
            action=data["action"],
            topic=data["topic"],
        )
        return Response(s.AclTestOutput(result).data)


class AclDetailView(TenantAPIView):
    @extend_schema(responses=s.AclOutput)
    def get(self, request, rule_id: int):
        return Response(
            s.AclOutput(acl_selectors.acl_rule_get(tenant=self.tenant, rule_id=rule_id)).data
        )

    @extend_schema(request=s.AclUpdateInput, responses=s.AclOutput)
    def patch(self, request, rule_id: int):
        rule = acl_selectors.acl_rule_get(tenant=self.tenant, rule_id=rule_id)
        data = validated(s.AclUpdateInput, request.data)
        return Response(s.AclOutput(acl_services.acl_update(rule, **data)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, rule_id: int):
        acl_services.acl_delete(acl_selectors.acl_rule_get(tenant=self.tenant, rule_id=rule_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- rules ----------------------------------------------------------------------------------


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


# -- quota, usage, invoices -----------------------------------------------------------------


class QuotaView(TenantAPIView):
    @extend_schema(responses=s.QuotaOutput)
    def get(self, request):
        limits = tenant_selectors.effective_quota(self.tenant)
        body = {
            "plan": self.tenant.plan.slug,
            "limits": limits,
            "overrides": self.tenant.quota_overrides or {},
            "throttling": throttling_body(limit_activity(tenant=self.tenant), limits),
        }
        return Response(s.QuotaOutput(body).data)


# `GET /usage?by=…`: what each adds beside the series (`rows` per UTC day, and totals).
BY_SELECTORS = {"device": usage_selectors.device_usage, "group": usage_selectors.group_usage}


class UsageView(TenantAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("from", str, description="ISO 8601 start (with granularity)"),
            OpenApiParameter("to", str, description="ISO 8601 end, exclusive (default now)"),
            OpenApiParameter("granularity", str, enum=["hour", "day"]),
            OpenApiParameter(
                "by",
                str,
                enum=["device", "group"],
                description="adds per-device (or per-device-group) rows, per UTC day, and totals",
            ),
            OpenApiParameter("since", str, description="ISO 8601: raw minutes from then"),
            *PAGE_PARAMETERS,
        ],
        responses=s.UsageResponse,
        operation_id="v1_usage_list",
    )
    def get(self, request):
        params = request.query_params
        if {"from", "to", "granularity", "by"} & set(params):
            return self._series(params)
        since, parsed = text_param(request, "since"), None
        if since:
            try:
                parsed = parse_datetime(since)
                if parsed is not None and parsed.tzinfo is not None:
                    parsed.astimezone(UTC)  # out of range once in UTC (year 9999, -23:59)
            except (ValueError, OverflowError):
                parsed = None
            if parsed is None:
                raise ValidationError({"since": ["Use a valid ISO 8601 date-time."]})
        usage = usage_selectors.usage_list(tenant=self.tenant, since=parsed)
        return paginated(self, request, usage, s.UsageOutput)

    def _series(self, params) -> Response:
        granularity = params.get("granularity", "day")
        by = params.get("by")
        if by is not None and by not in BY_SELECTORS:
            raise ValidationError(
                {"by": ["Use device or group (per-device or per-group rows, per UTC day)."]}
            )
        now = timezone.now()
        bounds = {}
        for name, default in (("from", None), ("to", now)):
            raw = params.get(name)
            if raw is not None and ("\x00" in raw or len(raw) > 64):
                raise ValidationError({name: ["Use an ISO 8601 date or date-time."]})
            if raw is None:
                if default is None:
                    raise ValidationError({name: ["Required with `to` or `granularity`."]})
                bounds[name] = default
                continue
            try:
                parsed = parse_datetime(raw) or _parse_date(raw)
                if parsed is not None and parsed.tzinfo is not None:
                    parsed.astimezone(UTC)  # out of range once in UTC
            except (ValueError, OverflowError):
                parsed = None
            if parsed is None:
                raise ValidationError({name: ["Use an ISO 8601 date or date-time."]})
            if timezone.is_naive(parsed):
                parsed = timezone.make_aware(parsed, UTC)
            bounds[name] = parsed
        series = billing_selectors.usage_series(
            tenant=self.tenant, start=bounds["from"], end=bounds["to"], granularity=granularity
        )
        body = {
            "from": bounds["from"].isoformat(),
            "to": bounds["to"].isoformat(),
            "granularity": granularity,
            "series": series,
        }
        if by is not None:
            body.update(
                BY_SELECTORS[by](tenant=self.tenant, start=bounds["from"], end=bounds["to"])
            )
        return Response(body)


def _parse_date(raw: str):
    from datetime import datetime

    try:
        return datetime.strptime(raw, "%Y-%m-%d")
    except ValueError:
        return None


class InvoiceView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(s.InvoiceOutput),
        operation_id="v1_invoices_list",
    )
    def get(self, request):
        return paginated(
            self, request, billing_selectors.invoices_list(tenant=self.tenant), s.InvoiceOutput
        )


class InvoiceDetailView(TenantAPIView):
    """`/invoices/{YYYY-MM}` as JSON, `.csv` or `.pdf`; another tenant's period is a 404."""

    @extend_schema(responses=s.InvoiceOutput)
    def get(self, request, period: str, fmt: str | None = None):
        invoice = billing_selectors.invoice_get(tenant=self.tenant, period=period)
        name = f"invoice-{self.tenant.slug}-{period}"
        if fmt == "csv":
            response = HttpResponse(invoice_render.invoice_csv(invoice), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
            return response
        if fmt == "pdf":
            response = HttpResponse(
                invoice_render.invoice_pdf(invoice), content_type="application/pdf"
            )
            response["Content-Disposition"] = f'attachment; filename="{name}.pdf"'
            return response
        return Response(s.InvoiceOutput(invoice).data)
