"""People of a tenant (writes): invitations by email with a role, accepting them, removing members,
owners for new tenants, one-time login links. Mail goes through Django's mail API, so the
embedded default prints it to the console and production sends it over SMTP (`EMAIL_*`)."""

from __future__ import annotations

import logging
import re
import smtplib
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from common.security import secrets
from tenants import audit
from tenants.accounts import trust as accounts
from tenants.models import ApiToken, Invitation, Membership, Tenant

log = logging.getLogger(__name__)
INVITATION_TTL = timedelta(days=7)
EMAIL_PATTERN = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def normalize_email(email: str) -> str:
    email = (email or "").strip().lower()
    if not EMAIL_PATTERN.fullmatch(email):
        raise ValidationError({"email": ["Enter a valid email address."]})
    return email


def invitation_digest(token: str) -> str:
    return secrets.api_token_digest(token)


class MailNotSent(Exception):
    """The invitation is saved (and can be sent again: `invitation_resend`), but the mail server
    did not take the email. `str()` names the problem for the person who invited."""

    def __init__(self, invitation: Invitation, cause: BaseException) -> None:
        self.invitation = invitation
        self.cause = cause
        server = f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}" if settings.EMAIL_HOST else ""
        detail = f"{type(cause).__name__}: {cause}".strip().rstrip(":")
        super().__init__(
            f"The invitation for {invitation.email} is saved, but the email could not be sent"
            + (f" (mail server {server}: {detail})" if server else f" ({detail})")
            + ". Send it again once mail works, or give them the link another way."
        )


def invitation_create(
    *,
    tenant: Tenant,
    email: str,
    role: str,
    invited_by: AbstractBaseUser | None,
    accept_url: Callable[[str], str],
) -> tuple[Invitation, str]:
    """Invite `email` to `tenant` as `role` and mail the link (`accept_url(token)`); returns the
    invitation and its token (only the digest is kept). A new invitation to the same address
    replaces the open one.

    The invitation is committed before the mail goes: a mail server that is down raises
    `MailNotSent` (logged) and leaves an open invitation `invitation_resend` sends again."""
    invitation, token = _invitation_record(
        tenant=tenant, email=email, role=role, invited_by=invited_by
    )
    _invitation_mail(invitation, accept_url(token))
    return invitation, token


def invitation_resend(
    invitation: Invitation, *, accept_url: Callable[[str], str]
) -> tuple[Invitation, str]:
    """Send an open invitation again with a fresh link (the old link stops working, the 7 days
    start again); `MailNotSent` as for `invitation_create`."""
    _open_invitation(invitation)
    token = _invitation_token()
    invitation.digest = invitation_digest(token)
    invitation.expires_at = timezone.now() + INVITATION_TTL
    invitation.save(update_fields=["digest", "expires_at"])
    _invitation_mail(invitation, accept_url(token))
    return invitation, token


def _invitation_token() -> str:
    return secrets.generate_api_token().replace("mqp_", "inv_", 1)


def _invitation_mail(invitation: Invitation, link: str) -> None:
    tenant = invitation.tenant
    who = getattr(invitation.invited_by, "email", "") or "An operator"
    try:
        send_mail(
            subject=f"You are invited to {tenant.name or tenant.slug} on the MQTT platform",
            message=(
                f"{who} invited you to the tenant {tenant.slug} as {invitation.role}.\n\n"
                f"Accept within {INVITATION_TTL.days} days: {link}\n"
            ),
            from_email=None,
            recipient_list=[invitation.email],
        )
    except (OSError, smtplib.SMTPException) as exc:  # refused, unreachable, timed out, rejected
        log.warning(
            "invitation mail not sent",
            extra={
                "fields": {
                    "tenant": tenant.slug,
                    "invitation": invitation.id,
                    "email": invitation.email,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            },
        )
        raise MailNotSent(invitation, exc) from exc


@transaction.atomic
def _invitation_record(
    *, tenant: Tenant, email: str, role: str, invited_by: AbstractBaseUser | None
) -> tuple[Invitation, str]:
    email = normalize_email(email)
    if role not in Membership.Role.values:
        raise ValidationError(
            {"role": [f"Role must be one of {', '.join(Membership.Role.values)}."]}
        )
    if role == Membership.Role.OWNER and invited_by is not None:
        # Only owners make owners: an admin inviting a second address of their own as owner could
        # then remove every real owner (issue 28).
        inviter = Membership.objects.filter(tenant=tenant, user=invited_by).first()
        if inviter is None or inviter.role != Membership.Role.OWNER:
            raise ValidationError({"role": ["Only an owner can invite an owner."]})
    if Membership.objects.filter(tenant=tenant, user__email__iexact=email).exists():
        raise ValidationError({"email": [f"{email} is already a member of {tenant.slug}."]})
    Invitation.objects.filter(tenant=tenant, email=email, accepted_at=None).delete()
    token = _invitation_token()
    invitation = Invitation.objects.create(
        tenant=tenant,
        email=email,
        role=role,
        digest=invitation_digest(token),
        invited_by=invited_by,
        expires_at=timezone.now() + INVITATION_TTL,
    )
    return invitation, token


def _open_invitation(invitation: Invitation) -> None:
    if not invitation.is_open:
        raise ValidationError({"invitation": ["This invitation was used or has expired."]})


@transaction.atomic
def invitation_accept(invitation: Invitation, user: AbstractBaseUser) -> Membership:
    """The invited person, logged in, joins. The link alone is not enough: the account's email
    must be the invited one."""
    invitation = Invitation.objects.select_for_update().get(id=invitation.id)
    _open_invitation(invitation)
    if (user.email or "").lower() != invitation.email:
        raise PermissionDenied(f"This invitation is for {invitation.email}.")
    with audit.acting_as(invitation.email):  # the invitee, logged in or not yet
        membership, _ = Membership.objects.get_or_create(
            user=user, tenant=invitation.tenant, defaults={"role": invitation.role}
        )
        # The link went to the address and the account holding it is logged in: the address is
        # proved (tenants.accounts.trust).
        accounts.mark_verified(user)
        invitation.accepted_at = timezone.now()
        invitation.save(update_fields=["accepted_at"])
    return membership


@transaction.atomic
def invitation_accept_new_user(invitation: Invitation, password: str) -> AbstractBaseUser:
    """An invited person without an account chooses a password and joins."""
    User = get_user_model()
    if User.objects.filter(email__iexact=invitation.email).exists():
        raise ValidationError({"email": ["An account with this email exists: log in first."]})
    user = User(username=invitation.email, email=invitation.email)
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise ValidationError({"password": exc.messages}) from None
    user.set_password(password)
    user.save()
    invitation_accept(invitation, user)
    return user


def invitation_revoke(invitation: Invitation) -> None:
    invitation.delete()


@transaction.atomic
def membership_remove(membership: Membership, *, by: Membership) -> None:
    """Remove a member (and the API tokens it holds for that tenant). Only an owner removes an
    owner; the last owner stays."""
    if membership.tenant_id != by.tenant_id or not by.can_write:
        raise PermissionDenied("Your role cannot remove members.")
    owners = Membership.objects.select_for_update().filter(
        tenant=membership.tenant, role=Membership.Role.OWNER
    )
    if membership.role == Membership.Role.OWNER:
        if by.role != Membership.Role.OWNER:
            raise PermissionDenied("Only an owner can remove an owner.")
        if owners.count() <= 1:
            raise ValidationError({"member": ["A tenant keeps at least one owner."]})
    ApiToken.objects.filter(tenant=membership.tenant, user=membership.user).delete()
    membership.delete()


def one_time_login_path(user: AbstractBaseUser) -> str:
    """A link that lets `user` choose a password and log in, once (Django's password reset token:
    it stops working when the password changes or the user logs in)."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return reverse("portal:password-reset-confirm", kwargs={"uidb64": uid, "token": token})


def owner_for_login_link(tenant: Tenant, email: str | None = None) -> AbstractBaseUser:
    """The owner of `tenant` a new one-time login link is for: the one named by `email`, or the
    only owner. Not a member who is not an owner, nor another tenant's owner."""
    owners = (
        get_user_model()
        .objects.filter(memberships__tenant=tenant, memberships__role=Membership.Role.OWNER)
        .order_by("email")
    )
    if email:
        user = owners.filter(email__iexact=normalize_email(email)).first()
        if user is None:
            raise ValidationError({"email": [f"{email} is not an owner of {tenant.slug}."]})
        return user
    listed = list(owners[:10])
    if not listed:
        raise ValidationError({"tenant": [f"{tenant.slug} has no owner: use --email to name one."]})
    if len(listed) > 1:
        names = ", ".join(u.email for u in listed)
        raise ValidationError({"email": [f"{tenant.slug} has several owners ({names}): pick one."]})
    return listed[0]


def login_link_mail(user: AbstractBaseUser, tenant: Tenant, url: str) -> None:
    """Mail a one-time login link to its owner (a mail server that is down raises `OSError` or
    `smtplib.SMTPException`: the caller says so)."""
    _mail_link(
        user,
        f"Your login link for {tenant.name or tenant.slug} on the MQTT platform",
        f"Choose a password and log in to the tenant {tenant.slug}: {url}",
    )


def operator_link_mail(user: AbstractBaseUser, url: str) -> None:
    """Mail a one-time login link to an operator (errors as `login_link_mail`)."""
    _mail_link(
        user,
        "Your operator login link for the MQTT platform",
        f"Choose a password and log in to the platform's overview of every tenant: {url}",
    )


def _mail_link(user: AbstractBaseUser, subject: str, lead: str) -> None:
    send_mail(
        subject=subject,
        message=(
            f"{lead}\n\n"
            "The link works once, and stops working when you log in or change your password.\n"
        ),
        from_email=None,
        recipient_list=[user.email],
    )


def portal_url(path: str) -> str:
    return settings.PORTAL_URL.rstrip("/") + path


@transaction.atomic
def owner_ensure(tenant: Tenant, email: str) -> AbstractBaseUser:
    """`email` owns `tenant`; a new account gets no password (it sets one by a one-time link).
    An existing account must have proved its address first (`accounts.require_claimable`)."""
    user, created = _account(email)
    if created:
        user.save()
    else:
        accounts.require_claimable(user, given=f"the tenant {tenant.slug}", field="owner")
    Membership.objects.update_or_create(
        user=user, tenant=tenant, defaults={"role": Membership.Role.OWNER}
    )
    return user


@transaction.atomic
def operator_ensure(email: str) -> tuple[AbstractBaseUser, bool]:
    """`email` is an operator of the platform: staff (the portal's overview of every tenant,
    `/operator/`) and superuser (the admin). The portal logs people in by email, so the account's
    username is the email; a new one gets no password (it sets one by a one-time link). Returns
    the account and whether it was made now."""
    user, created = _account(email)
    if not created:
        accounts.require_claimable(user, given="operator rights")
    user.is_staff = user.is_superuser = True
    user.save()
    return user, created


def _account(email: str) -> tuple[AbstractBaseUser, bool]:
    """The account of `email` (normalised; an invalid address: ValidationError), or a new one,
    not saved yet, whose username is the email (the portal logs in by email) and that has no
    password (a one-time link sets it); and whether it is new."""
    email = normalize_email(email)
    User = get_user_model()
    user = User.objects.filter(email__iexact=email).first()
    if user is not None:
        return user, False
    user = User(username=email, email=email)
    user.set_unusable_password()
    return user, True


@transaction.atomic
def demo_login_ensure(tenant: Tenant, *, email: str, password: str) -> AbstractBaseUser:
    """The portal login `make run` prints for its demo tenant (idempotent)."""
    User = get_user_model()
    user = User.objects.filter(username=email).first() or User(username=email, email=email)
    if not user.check_password(password):
        user.set_password(password)
    user.save()
    Membership.objects.get_or_create(
        user=user, tenant=tenant, defaults={"role": Membership.Role.OWNER}
    )
    # The operator running `make run` made this login for themselves: no banner to confirm it.
    accounts.mark_verified(user)
    return user
