"""Writes of job artifacts (files for jobs, such as firmware): uploaded into the object store
under the tenant's prefix (`common.jobs.artifacts.object_key`), one row each for its name, size
and SHA-256; and the check that a job document names only artifacts its tenant has.

An artifact is not replaced in place (a device must get the file its job was made with): upload
under a new name, or delete the old one first; one a running job names cannot be deleted."""

from __future__ import annotations

import hashlib
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from common.jobs.artifacts import NAME, object_key, references
from tenants.models import Job, JobArtifact, Tenant


class ArtifactConflict(Exception):
    """The name is taken, or a running job names the artifact (HTTP 409)."""


def _store(store: Any = None) -> Any:
    from common.stores.object_store import open_object_store

    return store if store is not None else open_object_store()


def artifact_upload(
    *,
    tenant: Tenant,
    name: str,
    data: bytes,
    content_type: str = "",
    actor: str = "",
    store: Any = None,
) -> JobArtifact:
    """Keep `data` as the tenant's artifact `name`; 409 when the name is taken."""
    if not isinstance(name, str) or not NAME.match(name):
        raise ValidationError(
            {"name": ["1-128 letters, digits, '.', '_' or '-', starting with a letter or digit."]}
        )
    taken = ArtifactConflict(f"An artifact {name!r} already exists: delete it first.")
    if JobArtifact.objects.filter(tenant=tenant, name=name).exists():
        raise taken
    try:
        with transaction.atomic():
            artifact = JobArtifact.objects.create(
                tenant=tenant,
                name=name,
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                content_type=(content_type or "")[:255],
                created_by=actor,
            )
            # Written inside the transaction: a failed write leaves no row naming no object.
            _store(store).put(object_key(tenant.slug, name), data)
    except IntegrityError:
        raise taken from None  # the same name, uploaded meanwhile by a concurrent request
    return artifact


def artifact_delete(*, artifact: JobArtifact, store: Any = None) -> None:
    """Delete an artifact; 409 naming the running jobs whose documents name it."""
    running = list(
        Job.objects.filter(
            tenant_id=artifact.tenant_id,
            status=Job.Status.IN_PROGRESS,
            artifacts__contains=[artifact.name],
        ).values_list("job_id", flat=True)
    )
    if running:
        raise ArtifactConflict(
            f"Running jobs name artifact {artifact.name!r}: {', '.join(sorted(running))}."
        )
    key = object_key(artifact.tenant.slug, artifact.name)
    artifact.delete()
    _store(store).delete(key)


def artifacts_named(*, tenant: Tenant, document: Any) -> list[str]:
    """The artifacts a job document's placeholders name, each the tenant's own; otherwise a
    400 naming the placeholders that name no artifact of the tenant."""
    names, invalid = references(document)
    if invalid:
        raise ValidationError(
            {
                "document": [
                    "Placeholders must name an artifact as "
                    "${aws:iot:s3-presigned-url:artifact/NAME}: "
                    + ", ".join(repr(target) for target in invalid)
                    + "."
                ]
            }
        )
    known = set(
        JobArtifact.objects.filter(tenant=tenant, name__in=names).values_list("name", flat=True)
    )
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValidationError(
            {
                "document": [
                    f"Unknown artifacts: {', '.join(unknown)} (POST /api/v1/jobs/artifacts)."
                ]
            }
        )
    return names
