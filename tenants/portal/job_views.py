"""The portal's Jobs pages: the tenant's jobs with their progress, and one job's progress per
device (each execution's status, details and times), with a cancel button for members who may
write. Thin: `job_selectors` reads, `job_services` writes (jobs are created through the REST
API, as AWS's CreateJob)."""

from __future__ import annotations

import json

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from common.jobs import executions as ex
from tenants import job_selectors, job_services
from tenants.portal.views import _context, tenant_view

ENDED = ex.TERMINAL


def _progress(job) -> dict:
    counts = job_selectors.process_details(job)
    total = sum(counts.values()) + len(job.unreleased or [])
    done = sum(counts[status] for status in ENDED)
    return {"counts": counts, "total": total, "done": done}


@tenant_view()
def jobs(request, membership):
    rows = job_selectors.job_list(tenant=membership.tenant)[:200]
    listed = [(job, _progress(job)) for job in rows]
    return render(request, "portal/jobs.html", _context(membership, jobs=listed))


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
            executions=job.executions.all(),
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
