"""Portal pages of the ACL: the tenant's rules with a form to add one, the tester (may this device
publish or subscribe to that topic, and which rule decided) and deleting a rule."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tenants.acls import selectors as acl_selectors
from tenants.acls import services as acl_services
from tenants.devices import selectors as device_selectors
from tenants.portal.forms import AclForm
from tenants.portal.views import _context, _form_errors, tenant_view


@tenant_view()
def acls(request, membership):
    tenant = membership.tenant
    names = device_selectors.device_names(tenant=tenant)
    form = AclForm(devices=names)
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = AclForm(request.POST, devices=names)
        if form.is_valid():
            data = dict(form.cleaned_data)
            device_name = data.pop("device")
            device = (
                device_selectors.device_get(tenant=tenant, name=device_name)
                if device_name
                else None
            )
            try:
                acl_services.acl_add(tenant=tenant, device=device, **data)
            except ValidationError as error:
                _form_errors(form, error)
            else:
                messages.success(request, "ACL rule added.")
                return redirect("portal:acls")
    rules = acl_selectors.acl_rules_list(tenant=tenant)
    test, test_error = None, ""
    query = {k: request.GET.get(k, "").strip() for k in ("device", "action", "topic")}
    if query["topic"]:
        if query["action"] not in ("publish", "subscribe"):
            query["action"] = "publish"
        try:
            acl_services.validate_acl_test_topic(query["action"], query["topic"])
        except ValidationError as error:
            test_error = "; ".join(error.message_dict.get("topic", error.messages))
        else:
            # Another tenant's device name is a 404, like every lookup here.
            test = acl_selectors.acl_check(
                tenant=tenant,
                device_name=query["device"],
                action=query["action"],
                topic=query["topic"],
            )
    return render(
        request,
        "portal/acls.html",
        _context(
            membership,
            rules=rules,
            form=form,
            device_names=names,
            test=test,
            test_error=test_error,
            query=query,
        ),
    )


@require_POST
@tenant_view(write=True)
def acl_delete(request, membership, rule_id: int):
    acl_services.acl_delete(acl_selectors.acl_rule_get(tenant=membership.tenant, rule_id=rule_id))
    messages.success(request, "ACL rule deleted.")
    return redirect("portal:acls")
