"""The portal's Fleet provisioning pages (AWS's provisioning templates and claims): the tenant's
templates with a form to make one; a template's page with its claim certificates, a button that
makes one (its certificate and private key shown once, to read or download, as the API answers
them once) and a revoke button per claim. Thin: `tenants.fleet.services` reads and writes, as for
`/api/v1/provisioning-templates`; another tenant's template or claim is a 404."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tenants.fleet import services as fleet
from tenants.jobs import selectors as job_selectors
from tenants.models import Tenant
from tenants.portal.job_forms import TemplateForm, TemplateGroupsForm
from tenants.portal.views import (
    _context,
    _form_errors,
    _pop_once,
    _show_once,
    _tls_context,
    tenant_view,
)


def _group_names(tenant: Tenant) -> list[str]:
    return job_selectors.group_names(tenant=tenant)


@tenant_view()
def templates(request, membership):
    tenant = membership.tenant
    form = TemplateForm(request.POST or None, groups=_group_names(tenant))
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        if form.is_valid():
            data = dict(form.cleaned_data)
            try:
                template = fleet.template_create(tenant=tenant, **data)
            except ValidationError as error:
                _form_errors(form, error)
            else:
                messages.success(request, f"Provisioning template {template.name} created.")
                return redirect("portal:provisioning-template", name=template.name)
    return render(
        request,
        "portal/provisioning.html",
        _context(membership, templates=fleet.templates_list(tenant=tenant), form=form),
    )


@tenant_view()
def template_detail(request, membership, name: str):
    template = fleet.template_get(tenant=membership.tenant, name=name)
    return _template_page(request, membership, template)


def _template_page(request, membership, template, groups_form: TemplateGroupsForm | None = None):
    names = _group_names(membership.tenant)
    groups_form = groups_form or TemplateGroupsForm(
        groups=names, initial={"groups": fleet.template_group_names(template)}
    )
    once = _pop_once(request)
    issued = once if once and once.get("template") == template.name else None
    return render(
        request,
        "portal/provisioning_template.html",
        _context(
            membership,
            template=template,
            parameters=fleet.template_parameters(template.device_name_template),
            claims=fleet.claims_list(template),
            issued=issued,
            groups_form=groups_form,
            **(_tls_context() if issued else {}),
        ),
    )


@require_POST
@tenant_view(write=True)
def template_groups(request, membership, name: str):
    """The groups new devices join: what `PATCH` with `groups` does, refused in its words."""
    template = fleet.template_get(tenant=membership.tenant, name=name)
    form = TemplateGroupsForm(request.POST, groups=_group_names(membership.tenant))
    if form.is_valid():
        try:
            fleet.template_update(template, groups=form.cleaned_data["groups"])
        except ValidationError as error:
            _form_errors(form, error)
        else:
            messages.success(request, "Groups saved: devices provisioned from now on join them.")
            return redirect("portal:provisioning-template", name=template.name)
    return _template_page(request, membership, template, form)


@require_POST
@tenant_view(write=True)
def claim_create(request, membership, name: str):
    """A claim certificate; its key goes to this member's session until the next page view
    shows it (then it is gone: the platform never stores it), as devices' secrets do."""
    template = fleet.template_get(tenant=membership.tenant, name=name)
    try:
        issued = fleet.claim_create(template)
    except ValidationError as error:  # max_certificates
        messages.error(request, " ".join(error.messages))
        return redirect("portal:provisioning-template", name=template.name)
    _show_once(
        request,
        template=template.name,
        certificate_id=issued.certificate.certificate_id,
        certificate_pem=issued.certificate.pem,
        private_key=issued.private_key,
        ca_pem=issued.ca_pem,
    )
    return redirect("portal:provisioning-template", name=template.name)


@require_POST
@tenant_view(write=True)
def claim_revoke(request, membership, name: str, certificate_id: str):
    template = fleet.template_get(tenant=membership.tenant, name=name)
    fleet.claim_revoke(fleet.claim_get(template, certificate_id))
    messages.success(request, "Claim certificate revoked: no device provisions with it now.")
    return redirect("portal:provisioning-template", name=template.name)


@require_POST
@tenant_view(write=True)
def template_delete(request, membership, name: str):
    fleet.template_delete(fleet.template_get(tenant=membership.tenant, name=name))
    messages.success(request, f"Template {name} deleted; the devices it made stay.")
    return redirect("portal:provisioning")
