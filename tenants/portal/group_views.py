"""The portal's Device groups pages (AWS's static thing groups, which jobs target): the tenant's
groups with a form to make one; a group's members with forms to add and remove devices and to
delete the group. Thin: `jobs.selectors` reads, `jobs.services` writes, as for
`/api/v1/groups`; another tenant's group is a 404, its devices unknown names."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tenants.devices import selectors as device_selectors
from tenants.jobs import selectors as job_selectors
from tenants.jobs import services as job_services
from tenants.portal.job_forms import GroupForm, GroupMembersForm
from tenants.portal.views import _context, _form_errors, tenant_view


def _device_names(tenant, exclude_group=None) -> list[str]:
    return device_selectors.device_names(tenant=tenant, outside_group=exclude_group)


@tenant_view()
def groups(request, membership):
    tenant = membership.tenant
    form = GroupForm(request.POST or None, devices=_device_names(tenant))
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        if form.is_valid():
            try:
                group = job_services.group_create(tenant=tenant, **form.cleaned_data)
            except job_services.JobConflict as error:
                form.add_error("name", str(error))
            except ValidationError as error:
                _form_errors(form, error)
            else:
                messages.success(request, f"Group {group.name} created.")
                return redirect("portal:group", name=group.name)
    listed = job_selectors.group_list(tenant=tenant)
    return render(request, "portal/groups.html", _context(membership, groups=listed, form=form))


@tenant_view()
def group_detail(request, membership, name: str):
    group = job_selectors.group_get(tenant=membership.tenant, name=name)
    form = GroupMembersForm(devices=_device_names(membership.tenant, exclude_group=group))
    return _group_page(request, membership, group, form)


def _group_page(request, membership, group, form):
    jobs = job_selectors.jobs_for_group(group)[:50]
    return render(
        request,
        "portal/group.html",
        _context(
            membership,
            group=group,
            members=job_selectors.group_members(group=group),
            form=form,
            jobs=jobs,
        ),
    )


@require_POST
@tenant_view(write=True)
def group_add(request, membership, name: str):
    group = job_selectors.group_get(tenant=membership.tenant, name=name)
    form = GroupMembersForm(
        request.POST, devices=_device_names(membership.tenant, exclude_group=group)
    )
    if form.is_valid():
        try:
            job_services.group_add_devices(group=group, devices=form.cleaned_data["devices"])
        except ValidationError as error:
            _form_errors(form, error)
        else:
            messages.success(
                request, f"Added to {group.name}: {', '.join(form.cleaned_data['devices'])}."
            )
            return redirect("portal:group", name=group.name)
    return _group_page(request, membership, group, form)


@require_POST
@tenant_view(write=True)
def group_remove(request, membership, name: str):
    group = job_selectors.group_get(tenant=membership.tenant, name=name)
    try:
        job_services.group_remove_devices(group=group, devices=request.POST.getlist("devices"))
    except ValidationError as error:
        for problems in error.message_dict.values():
            messages.error(request, " ".join(problems))
    else:
        messages.success(request, f"Removed from {group.name}.")
    return redirect("portal:group", name=group.name)


@require_POST
@tenant_view(write=True)
def group_delete(request, membership, name: str):
    group = job_selectors.group_get(tenant=membership.tenant, name=name)
    job_services.group_delete(group)
    messages.success(request, f"Group {name} deleted; its devices stay.")
    return redirect("portal:groups")
