"""REST API for fleet provisioning by claim: provisioning templates
(`/provisioning-templates`) and their claim certificates. Thin, as the others."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.serializers import StrictInput
from tenants.api.views import TenantAPIView, paginated, validated
from tenants.fleet import services as fleet


class AclRuleInput(StrictInput):
    action = serializers.ChoiceField(choices=["publish", "subscribe", "both"])
    permission = serializers.ChoiceField(choices=["allow", "deny"])
    topic = serializers.CharField(max_length=512)


GROUPS_HELP = "names of the tenant's device groups the new device joins (400 names unknown ones)"


class TemplateInput(StrictInput):
    name = serializers.CharField(max_length=64)
    device_name_template = serializers.CharField(
        max_length=128, help_text="the new device's name, e.g. sensor-{SerialNumber}"
    )
    acl_rules = AclRuleInput(many=True, required=False, help_text="given to the new device")
    attributes = serializers.DictField(required=False, help_text="given to the new device")
    enabled = serializers.BooleanField(required=False, default=True)
    pre_provisioning_hook_url = serializers.URLField(
        max_length=512,
        required=False,
        default="",
        help_text="called with the request's parameters; {allowProvisioning: false} refuses",
    )
    groups = serializers.ListField(
        child=serializers.CharField(max_length=128), required=False, help_text=GROUPS_HELP
    )


class TemplateUpdateInput(StrictInput):
    """What devices provisioned from now on become; the name stays."""

    device_name_template = serializers.CharField(max_length=128, required=False)
    acl_rules = AclRuleInput(many=True, required=False)
    attributes = serializers.DictField(required=False)
    enabled = serializers.BooleanField(required=False)
    pre_provisioning_hook_url = serializers.URLField(
        max_length=512, required=False, allow_blank=True
    )
    groups = serializers.ListField(
        child=serializers.CharField(max_length=128), required=False, help_text=GROUPS_HELP
    )


class TemplateOutput(serializers.Serializer):
    name = serializers.CharField()
    device_name_template = serializers.CharField()
    parameters = serializers.SerializerMethodField()
    acl_rules = serializers.JSONField()
    attributes = serializers.JSONField()
    enabled = serializers.BooleanField()
    pre_provisioning_hook_url = serializers.CharField()
    groups = serializers.SerializerMethodField(help_text="the device groups new devices join")
    created_at = serializers.DateTimeField()

    def get_parameters(self, template) -> list[str]:
        return fleet.template_parameters(template.device_name_template)

    def get_groups(self, template) -> list[str]:
        return sorted(fleet.template_group_names(template))


class ClaimOutput(serializers.Serializer):
    certificate_id = serializers.CharField()
    certificate_pem = serializers.CharField(source="pem")
    not_after = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)


class IssuedClaimOutput(ClaimOutput):
    private_key = serializers.CharField(help_text="shown this once, never stored")
    ca_pem = serializers.CharField(
        help_text="the tenant's fleet CA, which signed the claim certificate: for your records. "
        "It is not the CA a device trusts the broker with (the broker's own CA: the portal's "
        "Get started, /broker-ca.pem)"
    )


class TemplateListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(TemplateOutput),
        operation_id="v1_provisioning_templates_list",
    )
    def get(self, request):
        templates = fleet.templates_list(tenant=self.tenant)
        return paginated(self, request, templates, TemplateOutput)

    @extend_schema(request=TemplateInput, responses={201: TemplateOutput})
    def post(self, request):
        data = validated(TemplateInput, request.data)
        template = fleet.template_create(tenant=self.tenant, **data)
        return Response(TemplateOutput(template).data, status=status.HTTP_201_CREATED)


class TemplateDetailView(TenantAPIView):
    @extend_schema(responses=TemplateOutput)
    def get(self, request, name: str):
        return Response(TemplateOutput(fleet.template_get(tenant=self.tenant, name=name)).data)

    @extend_schema(
        request=TemplateUpdateInput,
        responses=TemplateOutput,
        description="Devices provisioned from now on get the new values; those made keep theirs.",
    )
    def patch(self, request, name: str):
        template = fleet.template_get(tenant=self.tenant, name=name)
        data = validated(TemplateUpdateInput, request.data)
        return Response(TemplateOutput(fleet.template_update(template, **data)).data)

    @extend_schema(responses={204: None}, description="Its claim certificates stop working.")
    def delete(self, request, name: str):
        fleet.template_delete(fleet.template_get(tenant=self.tenant, name=name))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ClaimListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(ClaimOutput),
        operation_id="v1_provisioning_templates_claims_list",
    )
    def get(self, request, name: str):
        template = fleet.template_get(tenant=self.tenant, name=name)
        return paginated(self, request, fleet.claims_list(template), ClaimOutput)

    @extend_schema(request=None, responses={201: IssuedClaimOutput})
    def post(self, request, name: str):
        issued = fleet.claim_create(fleet.template_get(tenant=self.tenant, name=name))
        body = dict(ClaimOutput(issued.certificate).data)
        body.update(private_key=issued.private_key, ca_pem=issued.ca_pem)
        return Response(body, status=status.HTTP_201_CREATED)


class ClaimDetailView(TenantAPIView):
    @extend_schema(responses={204: None}, description="Revoke: no device provisions with it.")
    def delete(self, request, name: str, certificate_id: str):
        template = fleet.template_get(tenant=self.tenant, name=name)
        fleet.claim_revoke(fleet.claim_get(template, certificate_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
