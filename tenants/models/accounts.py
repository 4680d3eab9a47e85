"""People's access to a tenant: memberships with a role, invitations to one, API tokens, and
what the platform knows of an account (`AccountTrust`); reads and writes are `tenants.accounts`
and `tenants.people`."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from tenants.audited import AuditedQuerySet
from tenants.models.tenant import Tenant


class Membership(models.Model):
    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class Role(models.TextChoices):
        OWNER = "owner"
        ADMIN = "admin"
        VIEWER = "viewer"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user")
        ]

    @property
    def can_write(self) -> bool:
        return self.role in (self.Role.OWNER, self.Role.ADMIN)


class Invitation(models.Model):
    """An invitation to join a tenant with a role, accepted by a link carrying `token` (only
    its digest is kept, like API tokens)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(
        max_length=8, choices=Membership.Role.choices, default=Membership.Role.VIEWER
    )
    digest = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    @property
    def is_open(self) -> bool:
        return self.accepted_at is None and self.expires_at > timezone.now()


class ApiToken(models.Model):
    """A bearer token for the REST API, acting as `user` within `tenant`. Only its digest is kept."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=64, default="default")
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # The login token (the one `POST /auth/token` and the API signup hand out) is kept sealed
    # (`common.security.sealed`) as well as digested, so the next login can hand the same token out again
    # instead of piling up a new one each time. Empty for named tokens, shown once only.
    sealed = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "tenant"],
                condition=~models.Q(sealed=""),
                name="one_login_token_per_member",
            )
        ]

    @property
    def is_login_token(self) -> bool:
        return bool(self.sealed)


class AccountTrust(models.Model):
    """What the platform knows of a person's account beyond Django's user: the email address it
    proved it holds (a signed link mailed there, a password reset or an accepted invitation), and
    digests of the addresses it last logged in from (the login throttle trusts those more).

    An account that has not proved its address keeps what it made itself (its own signup tenant)
    but is handed nothing else: no tenant by an operator, no operator rights (`tenants.accounts.trust`).
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="trust",
    )
    verified_email = models.EmailField(blank=True, default="")
    verified_at = models.DateTimeField(null=True, blank=True)
    # HMACs (keyed by SECRET_KEY) of the last few client addresses of successful logins: never
    # the addresses themselves.
    login_addresses = ArrayField(models.CharField(max_length=64), default=list, blank=True)
