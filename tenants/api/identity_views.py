"""REST API for device identity beyond secrets: CA certificates (`/cas`), devices' own
certificates (`/devices/{name}/certificates`) and JWT keys (`/jwt-keys`). Thin, as the others."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from tenants import audit
from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.serializers import StrictInput
from tenants.api.views import TenantAPIView, paginated, text_param, validated
from tenants.audit_words import describe
from tenants.devices import identity
from tenants.devices import selectors as device_selectors


class CaInput(StrictInput):
    name = serializers.CharField(max_length=64)
    pem = serializers.CharField(max_length=16_384, trim_whitespace=False)
    verification_pem = serializers.CharField(
        max_length=16_384,
        trim_whitespace=False,
        help_text="a certificate signed by the CA whose CN is the registration code",
    )
    auto_registration = serializers.BooleanField(
        required=False,
        default=False,
        help_text="just-in-time registration: a certificate it signed for a device not yet "
        "known makes that device (named by its CN) on first connect",
    )


class CaChangeInput(StrictInput):
    auto_registration = serializers.BooleanField()


class RegistrationCodeOutput(serializers.Serializer):
    registration_code = serializers.CharField()


class CaOutput(serializers.Serializer):
    name = serializers.CharField()
    fingerprint = serializers.CharField()
    subject = serializers.CharField()
    not_after = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)
    auto_registration = serializers.BooleanField()
    pem = serializers.CharField()


class DeviceCertificateInput(StrictInput):
    pem = serializers.CharField(max_length=16_384, trim_whitespace=False)


class DeviceCertificateOutput(serializers.Serializer):
    id = serializers.IntegerField()
    device = serializers.CharField(source="device.name")
    fingerprint = serializers.CharField()
    subject = serializers.CharField()
    not_after = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "description": "a PEM certificate: its subject CN names the device"},
            {
                "type": "object",
                "properties": {
                    "pem": {"type": "string", "description": "a PEM certificate"},
                    "device": {
                        "type": "string",
                        "description": "the device it is for (default: its subject CN)",
                    },
                },
                "required": ["pem"],
                "additionalProperties": False,
            },
        ]
    }
)
class CertificateItemField(serializers.Field):
    """One certificate to import: a PEM, or `{pem, device?}`. Only the shape is checked here;
    what is wrong with a certificate itself is that certificate's result, not a 400 for all."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = {"pem": data}
        if not isinstance(data, dict):
            raise serializers.ValidationError("Expected a PEM, or an object {pem, device?}.")
        unknown = sorted(set(data) - {"pem", "device"})
        if unknown:
            raise serializers.ValidationError(f"Unknown field(s): {', '.join(unknown)}.")
        pem, device = data.get("pem"), data.get("device", "")
        if not isinstance(pem, str):
            raise serializers.ValidationError("pem: a PEM certificate (text) is required.")
        if device is not None and not isinstance(device, str):
            raise serializers.ValidationError("device: a device name (text).")
        return {"pem": pem, "device": device or ""}

    def to_representation(self, value):
        return value


class CertificateImportInput(StrictInput):
    certificates = serializers.ListField(
        child=CertificateItemField(),
        allow_empty=False,
        max_length=identity.MAX_IMPORT,
        error_messages={
            "max_length": "At most {max_length} certificates per call: send the rest in "
            "further calls."
        },
    )
    ca = serializers.CharField(
        max_length=64,
        required=False,
        default="",
        allow_blank=True,
        help_text="the name of a registered CA: each certificate must be one it signed, and "
        "its CN is its device",
    )
    create_devices = serializers.BooleanField(
        required=False,
        default=False,
        help_text="make a device that does not exist yet (else its certificate is refused)",
    )


class CertificateImportResultOutput(serializers.Serializer):
    index = serializers.IntegerField(help_text="its place in `certificates`, from 0")
    device = serializers.CharField(allow_null=True)
    fingerprint = serializers.CharField(allow_null=True, help_text="SHA-256 of the DER, hex")
    status = serializers.ChoiceField(choices=["registered", "exists", "error"])
    error = serializers.CharField(allow_null=True, help_text="why it was refused")
    device_created = serializers.BooleanField()
    certificate_id = serializers.IntegerField(allow_null=True)


class CertificateImportOutput(serializers.Serializer):
    registered = serializers.IntegerField()
    exists = serializers.IntegerField()
    errors = serializers.IntegerField()
    results = CertificateImportResultOutput(many=True)


class CertificateOutput(DeviceCertificateOutput):
    """A device certificate as the tenant-wide list shows it: who issued it, and its status."""

    issuer = serializers.SerializerMethodField()
    status = serializers.SerializerMethodField()

    def get_issuer(self, certificate) -> str:
        return identity.certificate_issuer(certificate)

    @extend_schema_field(serializers.ChoiceField(choices=identity.CERTIFICATE_STATUSES))
    def get_status(self, certificate) -> str:
        return identity.certificate_status(certificate)


class JwtKeyInput(StrictInput):
    key = serializers.CharField(
        max_length=65_536, help_text="a PEM public key, or a JWKS document {keys: [...]}"
    )
    kid = serializers.CharField(max_length=64, required=False, default="")
    algorithm = serializers.ChoiceField(
        choices=["RS256", "ES256"], required=False, help_text="inferred from the key if omitted"
    )


class JwtKeyOutput(serializers.Serializer):
    kid = serializers.CharField()
    algorithm = serializers.CharField()
    public_key = serializers.CharField()
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)


class CaListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS, responses=page_of(CaOutput), operation_id="v1_cas_list"
    )
    def get(self, request):
        return paginated(self, request, identity.cas_list(tenant=self.tenant), CaOutput)

    @extend_schema(request=CaInput, responses={201: CaOutput})
    def post(self, request):
        try:
            ca = identity.ca_register(tenant=self.tenant, **validated(CaInput, request.data))
        except identity.RegistrationThrottled as exc:
            raise exceptions.Throttled(wait=exc.wait, detail=str(exc)) from None
        return Response(CaOutput(ca).data, status=status.HTTP_201_CREATED)


class CaRegistrationCodeView(TenantAPIView):
    @extend_schema(
        responses=RegistrationCodeOutput,
        description="The CN of the verification certificate that proves you hold a CA's key.",
    )
    def get(self, request):
        return Response({"registration_code": identity.registration_code(self.tenant)})


class CaDetailView(TenantAPIView):
    @extend_schema(responses=CaOutput)
    def get(self, request, name: str):
        return Response(CaOutput(identity.ca_get(tenant=self.tenant, name=name)).data)

    @extend_schema(request=CaChangeInput, responses=CaOutput)
    def patch(self, request, name: str):
        ca = identity.ca_get(tenant=self.tenant, name=name)
        data = validated(CaChangeInput, request.data)
        return Response(
            CaOutput(
                identity.ca_set_auto_registration(ca, **{"enabled": data["auto_registration"]})
            ).data
        )

    @extend_schema(responses={204: None}, description="Revoke: its devices are disconnected.")
    def delete(self, request, name: str):
        identity.ca_revoke(identity.ca_get(tenant=self.tenant, name=name))
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeviceCertificateListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(DeviceCertificateOutput),
        operation_id="v1_devices_certificates_list",
    )
    def get(self, request, name: str):
        device = device_selectors.device_get(tenant=self.tenant, name=name)
        certificates = identity.device_certificates_list(device=device)
        return paginated(self, request, certificates, DeviceCertificateOutput)

    @extend_schema(request=DeviceCertificateInput, responses={201: DeviceCertificateOutput})
    def post(self, request, name: str):
        device = device_selectors.device_get(tenant=self.tenant, name=name)
        data = validated(DeviceCertificateInput, request.data)
        certificate = identity.device_certificate_register(device=device, **data)
        return Response(DeviceCertificateOutput(certificate).data, status=status.HTTP_201_CREATED)


class DeviceCertificateDetailView(TenantAPIView):
    @extend_schema(responses={204: None}, description="Revoke: the device's TLS sessions end.")
    def delete(self, request, name: str, certificate_id: int):
        device = device_selectors.device_get(tenant=self.tenant, name=name)
        certificate = identity.device_certificate_get(device=device, certificate_id=certificate_id)
        identity.device_certificate_revoke(certificate)
        return Response(status=status.HTTP_204_NO_CONTENT)


class CertificateListView(TenantAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter(
                "status", str, enum=list(identity.CERTIFICATE_STATUSES), description="filter"
            ),
            OpenApiParameter("device", str, description="filter: one device's"),
            *PAGE_PARAMETERS,
        ],
        responses=page_of(CertificateOutput),
        operation_id="v1_certificates_list",
    )
    def get(self, request):
        wanted = text_param(request, "status")
        if wanted and wanted not in identity.CERTIFICATE_STATUSES:
            choices = ", ".join(identity.CERTIFICATE_STATUSES)
            raise exceptions.ValidationError({"status": [f"One of {choices}."]})
        rows = identity.certificates_list(
            tenant=self.tenant, status=wanted, device=text_param(request, "device")
        )
        return paginated(self, request, rows, CertificateOutput)


class CertificateImportView(TenantAPIView):
    @extend_schema(request=CertificateImportInput, responses={200: CertificateImportOutput})
    def post(self, request):
        results = identity.device_certificates_import(
            tenant=self.tenant, **validated(CertificateImportInput, request.data)
        )
        counts = {
            key: sum(r.status == word for r in results)
            for key, word in (
                ("registered", "registered"),
                ("exists", "exists"),
                ("errors", "error"),
            )
        }
        return Response(CertificateImportOutput({**counts, "results": results}).data)


class JwtKeyListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(JwtKeyOutput),
        operation_id="v1_jwt_keys_list",
    )
    def get(self, request):
        return paginated(self, request, identity.jwt_keys_list(tenant=self.tenant), JwtKeyOutput)

    @extend_schema(request=JwtKeyInput, responses={201: JwtKeyOutput(many=True)})
    def post(self, request):
        keys = identity.jwt_keys_add(tenant=self.tenant, **validated(JwtKeyInput, request.data))
        return Response(JwtKeyOutput(keys, many=True).data, status=status.HTTP_201_CREATED)


class JwtKeyDetailView(TenantAPIView):
    @extend_schema(responses=JwtKeyOutput)
    def get(self, request, kid: str):
        return Response(JwtKeyOutput(identity.jwt_key_get(tenant=self.tenant, kid=kid)).data)

    @extend_schema(responses={204: None}, description="Revoke: JWTs it signed stop working.")
    def delete(self, request, kid: str):
        identity.jwt_key_revoke(identity.jwt_key_get(tenant=self.tenant, kid=kid))
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- the audit log ------------------------------------------------------------------------------


class AuditEntryOutput(serializers.Serializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    actor = serializers.CharField()
    via = serializers.CharField()
    address = serializers.CharField(allow_null=True)
    action = serializers.CharField()
    target = serializers.CharField()
    detail = serializers.JSONField()
    description = serializers.SerializerMethodField(
        help_text='The change in words, e.g. "Quota max_connections changed from 10 to 20".'
    )

    def get_description(self, entry) -> str:
        return describe(entry)


class OwnersOnly(TenantAPIView):
    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if self.membership.role != "owner":
            raise exceptions.PermissionDenied("Only the tenant's owners see its audit log.")


class AuditView(OwnersOnly):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(AuditEntryOutput),
        operation_id="v1_audit_list",
        description="Every change to this tenant (who, what, when, from where), newest first.",
    )
    def get(self, request):
        entries = audit.entries_list(tenant=self.tenant)
        return paginated(self, request, entries, AuditEntryOutput)


class AuditCsvView(OwnersOnly):
    @extend_schema(
        responses={(200, "text/csv"): str},
        operation_id="v1_audit_csv",
        description="The whole audit log of this tenant as CSV.",
    )
    def get(self, request):
        return audit.csv_response(audit.entries_list(tenant=self.tenant))
