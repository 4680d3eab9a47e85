"""REST API of accounts and the tenant itself: sign-up, the login token (`/auth/token`), the
caller's tenant and its settings (`/tenant`) and API tokens (`/tokens`). Sign-up and login are
throttled per address and account (`tenants.accounts.throttles.LoginThrottle`)."""

from __future__ import annotations

from django.contrib.auth import authenticate
from django.core.exceptions import ValidationError
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants.accounts import login_tokens
from tenants.accounts import selectors as account_selectors
from tenants.accounts import services as account_services
from tenants.accounts import trust as accounts
from tenants.accounts.throttles import LoginThrottle
from tenants.api import account_serializers as s
from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated, validated
from tenants.client_address import client_address
from tenants.tenant import services as tenant_services


class AuthThrottled:
    throttle_classes = [LoginThrottle]


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
