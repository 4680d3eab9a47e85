"""REST API of the tenant's ACL: its rules (`/acls`) and the tester (`/acls/test`), which answers
with the broker's own evaluation."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from tenants.acls import selectors as acl_selectors
from tenants.acls import services as acl_services
from tenants.api import acl_serializers as s
from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated, validated
from tenants.devices import selectors as device_selectors


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
