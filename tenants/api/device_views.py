"""REST API of devices and their secrets: `/devices` (list, create, read, change, delete) and
`/devices/{name}/credentials` (rotate with a grace period, revoke). A device's certificates are
`identity_views`, its shadows `shadow_views`."""

from __future__ import annotations

from datetime import timedelta

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from tenants.api import device_serializers as s
from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated, text_param, validated
from tenants.devices import selectors as device_selectors
from tenants.devices import services as device_services


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
