"""REST API views: thin. They resolve the caller's tenant and role, validate the input shape, call
a service or selector, and serialize the result. Every object lookup goes through a selector
scoped to the caller's tenant, so another tenant's object is a 404.

This module is what every API view module builds on: `TenantAPIView` (the caller's tenant and
role; viewers only read), `paginated`, `text_param` and `validated`. The endpoints live by
sub-domain beside it: `account_views`, `device_views`, `acl_views`, `rule_views`, `usage_views`,
`billing_views`, `identity_views`, `job_views`, … (`tenants/api/urls.py` maps them)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants.accounts import selectors as account_selectors
from tenants.api.pagination import BoundedPagination
from tenants.models import ApiToken, Membership, Tenant

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
MAX_ID = 2**63 - 1  # bigint


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
