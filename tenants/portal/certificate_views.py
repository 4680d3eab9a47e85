"""Portal page of issue 41: the tenant's device certificates (device, fingerprint, issuer, expiry,
status, revoke) and the bulk import of many PEMs, pasted or uploaded, with a result for each.
Thin: `tenants.devices.identity` does the work, as for `POST /api/v1/certificates/import`."""

from __future__ import annotations

import re
from pathlib import PurePath

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tenants.devices import identity
from tenants.portal.views import _context, _form_errors, tenant_view

PAGE_SIZE = 50
MAX_FILE = 2 * 1024 * 1024  # an upload larger than this is no bundle of device certificates
PEM_BLOCK = re.compile(
    r"(?:^[ \t]*device:[ \t]*(?P<device>\S+)[ \t]*\r?\n(?:[ \t]*\r?\n)*)?"
    r"(?P<pem>-----BEGIN CERTIFICATE-----.*?"
    # a block ends at its END line, or where the next begins (a broken one spoils no other)
    r"(?:-----END CERTIFICATE-----|(?=-----BEGIN CERTIFICATE-----)|\Z))",
    re.DOTALL | re.MULTILINE,
)


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def clean(self, data, initial=None):
        if isinstance(data, list | tuple):
            return [super(MultipleFileField, self).clean(d, initial) for d in data]
        return [super().clean(data, initial)] if data else []


class ImportForm(forms.Form):
    pems = forms.CharField(
        label="Certificates (PEM)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
        help_text="Paste one or more certificates. Each names its device in its subject CN, "
        "or on a line 'device: NAME' just above it.",
    )
    files = MultipleFileField(
        label="Or upload PEM files",
        required=False,
        widget=MultipleFileInput(attrs={"accept": ".pem,.crt,.cer,.txt"}),
        help_text="Several files at once; each may hold several certificates.",
    )
    ca = forms.ChoiceField(
        label="Signed by CA",
        required=False,
        help_text="Optional: each certificate must be one this registered CA signed.",
    )
    create_devices = forms.BooleanField(
        label="Create devices that do not exist yet",
        required=False,
        help_text="Otherwise a certificate of a device that does not exist is refused.",
    )

    def __init__(self, *args, cas=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["ca"].choices = [("", "— any issuer —"), *((c, c) for c in cas)]


def split_pems(text: str, source: str) -> list[tuple[str, dict[str, str]]]:
    """The certificates of pasted text or a file, each with where it came from: `(label,
    {pem, device})`. Text that holds no certificate at all is kept as one item, so that its
    result says what is wrong with it rather than it vanishing."""
    found = [
        (f"{source} #{n}", {"pem": m["pem"], "device": m["device"] or ""})
        for n, m in enumerate(PEM_BLOCK.finditer(text), start=1)
    ]
    if not found and text.strip():
        return [(source, {"pem": text, "device": ""})]
    return found


def _items(form: ImportForm) -> list[tuple[str, dict[str, str]]]:
    items = split_pems(form.cleaned_data["pems"] or "", "pasted")
    for upload in form.cleaned_data["files"]:
        name = PurePath(upload.name).name
        if upload.size > MAX_FILE:
            raise ValidationError({"files": [f"{name} is larger than 2 MiB: no certificates."]})
        text = upload.read().decode("utf-8", errors="replace")
        items.extend(split_pems(text, name) or [(name, {"pem": "", "device": ""})])
    return items


@tenant_view()
def certificates_page(request, membership):
    tenant = membership.tenant
    cas = [ca.name for ca in identity.cas_list(tenant=tenant) if ca.revoked_at is None]
    form, results = ImportForm(cas=cas), None
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = ImportForm(request.POST, request.FILES, cas=cas)
        if form.is_valid():
            try:
                items = _items(form)
            except ValidationError as error:
                items = []
                _form_errors(form, error)
            else:
                if not items:
                    form.add_error("pems", "Paste or upload at least one certificate.")
            if items:
                try:
                    done = identity.device_certificates_import(
                        tenant=tenant,
                        certificates=[item for _, item in items],
                        ca=form.cleaned_data["ca"] or "",
                        create_devices=form.cleaned_data["create_devices"],
                    )
                except ValidationError as error:
                    _form_errors(form, error)
                else:
                    results = [(label, r) for (label, _), r in zip(items, done, strict=True)]
                    form = ImportForm(cas=cas)  # a new import starts empty
    status = request.GET.get("status", "")
    if status not in identity.CERTIFICATE_STATUSES:
        status = ""
    rows = identity.certificates_list(tenant=tenant, status=status or None)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    for certificate in page:
        certificate.issuer = identity.certificate_issuer(certificate)
        certificate.state = identity.certificate_status(certificate)
    return render(
        request,
        "portal/certificates.html",
        _context(
            membership,
            page=page,
            status=status,
            statuses=identity.CERTIFICATE_STATUSES,
            query=f"status={status}&" if status else "",
            form=form,
            results=results,
            max_import=identity.MAX_IMPORT,
        ),
    )


@require_POST
@tenant_view(write=True)
def certificate_revoke(request, membership, certificate_id: int):
    certificate = identity.certificate_get(tenant=membership.tenant, certificate_id=certificate_id)
    identity.device_certificate_revoke(certificate)
    messages.success(
        request,
        f"Certificate {certificate.fingerprint[:16]}… of {certificate.device.name} revoked: "
        "the connections it admitted were ended.",
    )
    return redirect("portal:certificates")
