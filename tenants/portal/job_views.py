"""The portal's Jobs pages: the tenant's jobs with their progress and, for members who may write,
the form that creates one (AWS's CreateJob, as `POST /api/v1/jobs` takes it); one job's progress
per device (each execution's status, details and times), with a cancel button. Thin:
`jobs.selectors` reads, `jobs.services` writes and checks what the form sends, as for the API."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from common.jobs import executions as ex
from tenants.devices import selectors as device_selectors
from tenants.jobs import selectors as job_selectors
from tenants.jobs import services as job_services
from tenants.portal.job_forms import JobForm
from tenants.portal.views import _context, _form_errors, tenant_view

ENDED = ex.TERMINAL


def _progress(job) -> dict:
    counts = job_selectors.process_details(job)
    total = sum(counts.values()) + len(job.unreleased or [])
    done = sum(counts[status] for status in ENDED)
    return {"counts": counts, "total": total, "done": done}


# Where the service's refusals belong on the form (its keys are the REST API's fields).
JOB_ERROR_FIELDS = {
    "rollout": "rollout_per_minute",
    "abort": "abort_threshold",
    "targets": "devices",
    "targets.devices": "devices",
    "targets.groups": "groups",
}


def _job_form(request, membership) -> JobForm:
    tenant = membership.tenant
    return JobForm(
        request.POST if request.method == "POST" else None,
        devices=device_selectors.device_names(tenant=tenant),
        groups=job_selectors.group_names(tenant=tenant),
    )


def _create(request, membership, form: JobForm):
    """The job the valid form describes, or None with the service's refusals on the form."""
    data = form.cleaned_data
    try:
        return job_services.job_create(
            tenant=membership.tenant,
            job_id=data["job_id"],
            document=data["document"],
            targets={"devices": data["devices"], "groups": data["groups"]},
            description=data["description"],
            timeout_minutes=data["timeout_minutes"],
            rollout_per_minute=data["rollout_per_minute"],
            abort_criteria=form.abort_criteria(),
            actor=request.user.email,
        )
    except job_services.JobConflict as error:
        form.add_error("job_id", str(error))
    except ValidationError as error:
        problems = getattr(error, "message_dict", {"__all__": error.messages})
        _form_errors(
            form,
            ValidationError({JOB_ERROR_FIELDS.get(k, k): v for k, v in problems.items()}),
        )
    return None


@tenant_view()
def jobs(request, membership):
    form = _job_form(request, membership)
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        job = _create(request, membership, form) if form.is_valid() else None
        if job is not None:
            messages.success(request, f"Job {job.job_id} created.")
            return redirect("portal:job", job_id=job.job_id)
    rows = job_selectors.job_list(tenant=membership.tenant)[:200]
    listed = [(job, _progress(job)) for job in rows]
    return render(request, "portal/jobs.html", _context(membership, jobs=listed, form=form))


@tenant_view()
def job_detail(request, membership, job_id: str):
    job = job_selectors.job_get(tenant=membership.tenant, job_id=job_id)
    return render(
        request,
        "portal/job.html",
        _context(
            membership,
            job=job,
            progress=_progress(job),
            executions=job_selectors.executions_list(job=job),
            document=json.dumps(job.document, indent=2, ensure_ascii=False),
            statuses=ex.STATUSES,
        ),
    )


@require_POST
@tenant_view(write=True)
def job_cancel(request, membership, job_id: str):
    job = job_selectors.job_get(tenant=membership.tenant, job_id=job_id)
    force = request.POST.get("force") == "on"
    try:
        job_services.job_cancel(job=job, force=force)
    except job_services.JobConflict as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Job {job.job_id} cancelled.")
    return redirect("portal:job", job_id=job.job_id)
