"""REST API views: thin. They resolve the caller's tenant and role, validate the input shape, call
a service or selector, and serialize the result. Every object lookup goes through a selector
scoped to the caller's tenant, so another tenant's object is a 404."""

from __future__ import annotations

from datetime import UTC

from django.contrib.auth import authenticate
from django.core.exceptions import ValidationError
from django.http import Http404
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants import selectors, services
from tenants.api import serializers as s
from tenants.api.pagination import PAGE_PARAMETERS, BoundedPagination, page_of
from tenants.models import ApiToken, Credential, Membership, Tenant
from tenants.throttles import LoginThrottle

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
MAX_ID = 2**63 - 1  # bigint


class AuthThrottled:
    throttle_classes = [LoginThrottle]


class TenantAPIView(APIView):
    """Resolves `self.tenant` and `self.membership`; viewers may only read."""

    tenant: Tenant
    membership: Membership

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if any(isinstance(v, int) and v > MAX_ID for v in kwargs.values()):
            raise Http404("No such object.")  # beyond any id: not a database error
        if isinstance(request.auth, ApiToken):
            tenant = request.auth.tenant
            membership = selectors.membership_get(request.user, tenant)
        else:
            memberships = selectors.memberships_for_user(request.user)
            wanted = request.headers.get("X-Tenant")
            if wanted:
                memberships = memberships.filter(tenant__slug=wanted)
            membership = memberships.first()
            tenant = membership.tenant if membership else None
        if membership is None or tenant is None:
            raise exceptions.PermissionDenied("You are not a member of any tenant.")
        self.tenant, self.membership = tenant, membership
        if request.method not in SAFE_METHODS and not membership.can_write:
            raise exceptions.PermissionDenied(
                f"Your role ({membership.role}) can read but not change this tenant."
            )


def paginated(view: APIView, request, queryset, serializer_class) -> Response:
    paginator = BoundedPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


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
        tenant, user, token = services.signup(**data)
        body = {
            "tenant": s.TenantOutput(tenant).data,
            "token": token,
            "user": {"email": user.email},
        }
        return Response(body, status=status.HTTP_201_CREATED)


class TokenView(AuthThrottled, APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=s.TokenInput, responses={200: s.TokenOutput}, auth=[])
    def post(self, request):
        data = validated(s.TokenInput, request.data)
        email = data["email"].strip().lower()
        user = authenticate(request, username=email, password=data["password"])
        if user is None:
            raise ValidationError({"non_field_errors": ["Wrong email or password."]})
        memberships = selectors.memberships_for_user(user)
        if data.get("tenant"):
            memberships = memberships.filter(tenant__slug=data["tenant"])
        membership = memberships.order_by("created_at").first()
        if membership is None:
            raise ValidationError({"tenant": ["You are not a member of that tenant."]})
        _, token = services.api_token_create(user=user, tenant=membership.tenant, name="api")
        return Response({"token": token, "tenant": membership.tenant.slug})


class CurrentTenantView(TenantAPIView):
    @extend_schema(responses=s.CurrentTenantOutput)
    def get(self, request):
        data = dict(s.TenantOutput(self.tenant).data, role=self.membership.role)
        return Response(data)

    @extend_schema(request=s.TenantSettingsInput, responses=s.CurrentTenantOutput)
    def patch(self, request):
        settings = validated(s.TenantSettingsInput, request.data)
        tenant = services.tenant_update_settings(self.tenant, **settings)
        return Response(dict(s.TenantOutput(tenant).data, role=self.membership.role))


class ApiTokenListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(s.ApiTokenOutput),
        operation_id="v1_tokens_list",
    )
    def get(self, request):
        tokens = selectors.api_tokens_list(tenant=self.tenant, user=request.user)
        return paginated(self, request, tokens, s.ApiTokenOutput)

    @extend_schema(request=s.ApiTokenInput, responses={201: s.ApiTokenCreatedOutput})
    def post(self, request):
        data = validated(s.ApiTokenInput, request.data)
        token, raw = services.api_token_create(user=request.user, tenant=self.tenant, **data)
        body = dict(s.ApiTokenOutput(token).data, token=raw)
        return Response(body, status=status.HTTP_201_CREATED)


class ApiTokenDetailView(TenantAPIView):
    @extend_schema(responses={204: None})
    def delete(self, request, token_id: int):
        token = (
            selectors.api_tokens_list(tenant=self.tenant, user=request.user)
            .filter(id=token_id)
            .first()
        )
        if token is None:
            raise Http404("No such token.")
        services.api_token_delete(token)
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
        devices = selectors.devices_list(tenant=self.tenant, name=text_param(request, "name"))
        return paginated(self, request, devices, s.DeviceOutput)

    @extend_schema(request=s.DeviceCreateInput, responses={201: s.DeviceCreatedOutput})
    def post(self, request):
        data = validated(s.DeviceCreateInput, request.data)
        device, secret = services.device_create(tenant=self.tenant, **data)
        body = dict(s.DeviceOutput(device).data, password=secret)
        return Response(body, status=status.HTTP_201_CREATED)


class DeviceDetailView(TenantAPIView):
    @extend_schema(responses=s.DeviceOutput)
    def get(self, request, name: str):
        return Response(s.DeviceOutput(selectors.device_get(tenant=self.tenant, name=name)).data)

    @extend_schema(request=s.DeviceUpdateInput, responses=s.DeviceOutput)
    def patch(self, request, name: str):
        device = selectors.device_get(tenant=self.tenant, name=name)
        data = validated(s.DeviceUpdateInput, request.data)
        return Response(s.DeviceOutput(services.device_update(device, **data)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, name: str):
        services.device_delete(selectors.device_get(tenant=self.tenant, name=name))
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeviceCredentialsView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(s.CredentialOutput),
        operation_id="v1_devices_credentials_list",
    )
    def get(self, request, name: str):
        device = selectors.device_get(tenant=self.tenant, name=name)
        return paginated(self, request, device.credentials.all(), s.CredentialOutput)

    @extend_schema(request=s.CredentialRotateInput, responses={201: s.CredentialCreatedOutput})
    def post(self, request, name: str):
        device = selectors.device_get(tenant=self.tenant, name=name)
        data = validated(s.CredentialRotateInput, request.data)
        credential, secret = services.credential_rotate(device, **data)
        body = {
            "id": credential.id,
            "username": device.username,
            "password": secret,
            "expires_at": credential.expires_at,
        }
        return Response(s.CredentialCreatedOutput(body).data, status=status.HTTP_201_CREATED)


class DeviceCredentialDetailView(TenantAPIView):
    @extend_schema(responses={204: None})
    def delete(self, request, name: str, credential_id: int):
        device = selectors.device_get(tenant=self.tenant, name=name)
        credential = Credential.objects.filter(device=device, id=credential_id).first()
        if credential is None:
            raise Http404("No such credential.")
        services.credential_revoke(credential)
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- ACLs -----------------------------------------------------------------------------------


class AclListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS, responses=page_of(s.AclOutput), operation_id="v1_acls_list"
    )
    def get(self, request):
        return paginated(self, request, selectors.acl_rules_list(tenant=self.tenant), s.AclOutput)

    @extend_schema(request=s.AclInput, responses={201: s.AclOutput})
    def post(self, request):
        data = validated(s.AclInput, request.data)
        device_name = data.pop("device")
        device = None
        if device_name:
            try:
                device = selectors.device_get(tenant=self.tenant, name=device_name)
            except Http404:
                raise ValidationError({"device": [f"No device named {device_name!r}."]}) from None
        rule = services.acl_add(tenant=self.tenant, device=device, **data)
        return Response(s.AclOutput(rule).data, status=status.HTTP_201_CREATED)


class AclDetailView(TenantAPIView):
    @extend_schema(responses=s.AclOutput)
    def get(self, request, rule_id: int):
        return Response(
            s.AclOutput(selectors.acl_rule_get(tenant=self.tenant, rule_id=rule_id)).data
        )

    @extend_schema(request=s.AclUpdateInput, responses=s.AclOutput)
    def patch(self, request, rule_id: int):
        rule = selectors.acl_rule_get(tenant=self.tenant, rule_id=rule_id)
        data = validated(s.AclUpdateInput, request.data)
        return Response(s.AclOutput(services.acl_update(rule, **data)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, rule_id: int):
        services.acl_delete(selectors.acl_rule_get(tenant=self.tenant, rule_id=rule_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- rules ----------------------------------------------------------------------------------


class RuleListView(TenantAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("name", str, description="filter: name contains"),
            *PAGE_PARAMETERS,
        ],
        responses=page_of(s.RuleOutput),
        operation_id="v1_rules_list",
    )
    def get(self, request):
        rules = selectors.rules_list(tenant=self.tenant, name=text_param(request, "name"))
        return paginated(self, request, rules, s.RuleOutput)

    @extend_schema(request=s.RuleInput, responses={201: s.RuleOutput})
    def post(self, request):
        data = validated(s.RuleInput, request.data)
        rule = services.rule_create(tenant=self.tenant, **data)
        return Response(s.RuleOutput(rule).data, status=status.HTTP_201_CREATED)


class RuleDetailView(TenantAPIView):
    @extend_schema(responses=s.RuleOutput)
    def get(self, request, name: str):
        return Response(s.RuleOutput(selectors.rule_get(tenant=self.tenant, name=name)).data)

    @extend_schema(request=s.RuleUpdateInput, responses=s.RuleOutput)
    def patch(self, request, name: str):
        rule = selectors.rule_get(tenant=self.tenant, name=name)
        data = validated(s.RuleUpdateInput, request.data)
        return Response(s.RuleOutput(services.rule_update(rule, **data)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, name: str):
        services.rule_delete(selectors.rule_get(tenant=self.tenant, name=name))
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- quota, usage, invoices -----------------------------------------------------------------


class QuotaView(TenantAPIView):
    @extend_schema(responses=s.QuotaOutput)
    def get(self, request):
        body = {
            "plan": self.tenant.plan.slug,
            "limits": selectors.effective_quota(self.tenant),
            "overrides": self.tenant.quota_overrides or {},
        }
        return Response(s.QuotaOutput(body).data)


class UsageView(TenantAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("since", str, description="ISO 8601: minutes from then"),
            *PAGE_PARAMETERS,
        ],
        responses=page_of(s.UsageOutput),
        operation_id="v1_usage_list",
    )
    def get(self, request):
        usage = selectors.usage_list(tenant=self.tenant)
        since = text_param(request, "since")
        if since:
            try:
                parsed = parse_datetime(since)
                if parsed is not None and parsed.tzinfo is not None:
                    parsed.astimezone(UTC)  # out of range once in UTC (year 9999, -23:59)
            except (ValueError, OverflowError):
                parsed = None
            if parsed is None:
                raise ValidationError({"since": ["Use a valid ISO 8601 date-time."]})
            usage = usage.filter(minute__gte=parsed)
        return paginated(self, request, usage, s.UsageOutput)


class InvoiceView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(s.InvoiceOutput),
        operation_id="v1_invoices_list",
    )
    def get(self, request):
        return paginated(
            self, request, selectors.invoices_list(tenant=self.tenant), s.InvoiceOutput
        )
