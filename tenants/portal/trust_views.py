"""Portal pages of issue 20: device identity (CA certificates, JWT keys) and the audit log."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tenants import audit
from tenants.audit_words import describe
from tenants.devices import identity
from tenants.portal.views import _context, _form_errors, tenant_view


class CaForm(forms.Form):
    name = forms.CharField(max_length=64, help_text="A name for this CA, e.g. fleet-2026.")
    pem = forms.CharField(
        label="CA certificate (PEM)",
        max_length=16_384,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
        help_text="Devices present certificates it signed; their subject CN names the device.",
    )
    verification_pem = forms.CharField(
        label="Verification certificate (PEM)",
        max_length=16_384,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        help_text="Signed by the CA, with the registration code above as its CN.",
    )


class JwtKeyForm(forms.Form):
    kid = forms.CharField(max_length=64, required=False, help_text="Key id (for a PEM key).")
    key = forms.CharField(
        label="Public key (PEM) or JWKS",
        max_length=65_536,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        help_text="RS256 (RSA ≥ 2048) or ES256 (P-256). Devices send a JWT as their password.",
    )


@tenant_view()
def identity_page(request, membership):
    tenant = membership.tenant
    ca_form, key_form = CaForm(prefix="ca"), JwtKeyForm(prefix="key")
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        if "ca-pem" in request.POST:
            ca_form = CaForm(request.POST, prefix="ca")
            if ca_form.is_valid():
                try:
                    identity.ca_register(tenant=tenant, **ca_form.cleaned_data)
                except ValidationError as error:  # over max_ca_certificates among them
                    _form_errors(ca_form, error)
                except identity.RegistrationThrottled as error:
                    ca_form.add_error(None, str(error))
                else:
                    messages.success(request, "CA registered.")
                    return redirect("portal:identity")
        else:
            key_form = JwtKeyForm(request.POST, prefix="key")
            if key_form.is_valid():
                try:
                    identity.jwt_keys_add(tenant=tenant, **key_form.cleaned_data)
                except ValidationError as error:
                    _form_errors(key_form, error)
                else:
                    messages.success(request, "Key registered.")
                    return redirect("portal:identity")
    return render(
        request,
        "portal/identity.html",
        _context(
            membership,
            cas=identity.cas_list(tenant=tenant),
            keys=identity.jwt_keys_list(tenant=tenant),
            ca_form=ca_form,
            key_form=key_form,
            registration_code=identity.registration_code(tenant),
        ),
    )


@require_POST
@tenant_view(write=True)
def ca_revoke(request, membership, name: str):
    identity.ca_revoke(identity.ca_get(tenant=membership.tenant, name=name))
    messages.success(request, f"CA {name} revoked: its devices were disconnected.")
    return redirect("portal:identity")


@require_POST
@tenant_view(write=True)
def ca_auto_registration(request, membership, name: str):
    """Just-in-time registration on or off for one CA (`PATCH /api/v1/cas/{name}`)."""
    ca = identity.ca_get(tenant=membership.tenant, name=name)
    enabled = request.POST.get("enabled") == "on"
    identity.ca_set_auto_registration(ca, enabled)
    state = "on: a device it signed registers on its first connection" if enabled else "off"
    messages.success(request, f"Just-in-time registration for CA {name} is {state}.")
    return redirect("portal:identity")


@require_POST
@tenant_view(write=True)
def jwt_key_revoke(request, membership, kid: str):
    identity.jwt_key_revoke(identity.jwt_key_get(tenant=membership.tenant, kid=kid))
    messages.success(request, f"Key {kid} revoked.")
    return redirect("portal:identity")


@tenant_view()
def audit_page(request, membership):
    if membership.role != "owner":
        raise PermissionDenied("Only the tenant's owners see its audit log.")
    entries = list(audit.entries_list(tenant=membership.tenant)[:200])
    for entry in entries:
        entry.description = describe(entry)
    return render(request, "portal/audit.html", _context(membership, entries=entries))


@tenant_view()
def audit_csv(request, membership):
    if membership.role != "owner":
        raise PermissionDenied("Only the tenant's owners see its audit log.")
    return audit.csv_response(audit.entries_list(tenant=membership.tenant))
