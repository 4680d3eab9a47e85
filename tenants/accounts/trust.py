"""People's accounts beyond Django's user: proof of the email address, what an unproved account
may be given, the addresses an account logs in from, and what a new password ends.

Anyone can sign up with any address, so until an account proves it holds its address (a signed
link mailed there, followed while logged in as that account; or a password reset, or an accepted
invitation, which are links mailed there too) it keeps only what it made itself — the tenant of
its own signup — and is handed nothing else: an operator's `create_tenant --owner` or
`create_operator` for that address is refused (`require_claimable`). Otherwise whoever squatted an
address before its holder came would be given what was meant for the holder (account
pre-hijacking).

A new password (reset, change, the admin, `changepassword`) ends every API token of the account;
Django ends its other sessions (their session hash no longer matches)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import smtplib

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db.models.signals import post_save, pre_save
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes, force_str
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode

from tenants.models import AccountTrust, ApiToken

log = logging.getLogger(__name__)
RESEND_LIMIT = 3  # verification links an account may ask for per hour (bounded mail)
KNOWN_ADDRESSES = 10  # login addresses remembered per account


# -- proof of the email address ---------------------------------------------------------------


class _VerificationTokens(PasswordResetTokenGenerator):
    """Django's password-reset tokens with their own salt; the hash covers the address and what
    is verified, so a link dies once used or when the account's email changes."""

    key_salt = "tenants.accounts.trust.email-verification"

    def _make_hash_value(self, user, timestamp) -> str:
        trust = AccountTrust.objects.filter(user=user).first()
        verified = trust.verified_email if trust else ""
        return f"{user.pk}{timestamp}{(user.email or '').lower()}{verified}"


_tokens = _VerificationTokens()


def is_verified(user: AbstractBaseUser) -> bool:
    email = (user.email or "").lower()
    return bool(email) and AccountTrust.objects.filter(user=user, verified_email=email).exists()


def mark_verified(user: AbstractBaseUser) -> None:
    """The account's holder proved they read mail at its address."""
    AccountTrust.objects.update_or_create(
        user=user,
        defaults={"verified_email": (user.email or "").lower(), "verified_at": timezone.now()},
    )


def require_claimable(user: AbstractBaseUser, *, given: str, field: str = "email") -> None:
    """Refuse to hand `given` (a tenant, operator rights) to an existing account that has not
    proved its address. An account nobody ever used (made by an operator command, no password
    yet: only the one-time link mailed to the address opens it) is as good as proved."""
    if is_verified(user):
        return
    pristine = (
        not user.has_usable_password()
        and user.last_login is None
        and not ApiToken.objects.filter(user=user).exists()
    )
    if pristine:
        return
    raise ValidationError(
        {
            field: [
                f"{user.email} has an account whose email address is not verified, so it cannot "
                f"be given {given}: whoever signed up with it may not hold that mailbox. Its "
                "holder confirms it with the link the portal mails (logged in: the banner's "
                "'Send the link again'), or, if they never signed up, chooses a password at "
                "/password-reset/ (which proves the mailbox and ends every session and API "
                "token the account had). Then run this again."
            ]
        }
    )


def verification_path(user: AbstractBaseUser) -> str:
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return reverse("portal:email-verify", kwargs={"uidb64": uid, "token": _tokens.make_token(user)})


def verification_mail(user: AbstractBaseUser, url: str) -> None:
    """Mail the link (`url`, absolute). A mail server that is down raises `OSError` or
    `smtplib.SMTPException`: the caller says so."""
    send_mail(
        subject="Confirm your email address for the MQTT platform",
        message=(
            f"Someone signed up to the MQTT platform as {user.email}. If it was you, confirm the "
            f"address (log in when asked):\n\n{url}\n\n"
            "Until it is confirmed, the account keeps its own tenant but cannot be added to "
            "another or made an operator. If it was not you, ignore this email; to take the "
            "address back, reset the password: that ends every session and API token the "
            "account had.\n"
        ),
        from_email=None,
        recipient_list=[user.email],
    )


def verification_mail_quietly(user: AbstractBaseUser, url: str) -> bool:
    """As `verification_mail`, but a mail server that is down is logged, not raised (signup goes
    on: the portal's banner sends the link again)."""
    try:
        verification_mail(user, url)
    except (OSError, smtplib.SMTPException) as exc:
        log.warning(
            "verification mail not sent",
            extra={"fields": {"email": user.email, "error": f"{type(exc).__name__}: {exc}"}},
        )
        return False
    return True


def user_from_uid(uidb64: str) -> AbstractBaseUser | None:
    try:
        pk = force_str(urlsafe_base64_decode(uidb64))
        return get_user_model().objects.filter(pk=int(pk)).first()
    except (TypeError, ValueError, OverflowError):
        return None


def verify(user: AbstractBaseUser, token: str) -> bool:
    """Follow a verification link as `user` (the caller checked who is logged in)."""
    if not _tokens.check_token(user, token):
        return False
    mark_verified(user)
    return True


# -- the addresses an account logs in from ----------------------------------------------------


def _address_digest(address: str) -> str:
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, f"login-address:{address}".encode(), hashlib.sha256).hexdigest()[:32]


def login_address_remember(user: AbstractBaseUser, address: str) -> None:
    """`user` logged in from `address`: it is one of their usual ones (the last few are kept)."""
    if not address or user.pk is None:
        return
    digest = _address_digest(address)
    trust, _ = AccountTrust.objects.get_or_create(user=user)
    if trust.login_addresses[:1] == [digest]:
        return
    kept = [digest] + [d for d in trust.login_addresses if d != digest]
    trust.login_addresses = kept[:KNOWN_ADDRESSES]
    trust.save(update_fields=["login_addresses"])


def login_address_known(username: str, address: str) -> bool:
    """Has the account named `username` (the email the portal logs in by) logged in from
    `address` lately?"""
    if not username or not address:
        return False
    return AccountTrust.objects.filter(
        user__username=username, login_addresses__contains=[_address_digest(address)]
    ).exists()


# -- a new password ends the account's API tokens ---------------------------------------------


def _note_new_password(sender, instance, update_fields=None, **kwargs) -> None:
    # `_password` holds the raw password between `set_password()` and `save()`; Django's re-hash
    # of the same password at login clears it first, so that is not a new password.
    changed = instance.pk is not None and getattr(instance, "_password", None) is not None
    if update_fields is not None and "password" not in update_fields:
        changed = False
    instance._new_password_saved = changed


def _end_tokens(sender, instance, created=False, **kwargs) -> None:
    if getattr(instance, "_new_password_saved", False) and not created:
        instance._new_password_saved = False
        ApiToken.objects.filter(user=instance).delete()


def connect_signals() -> None:
    User = get_user_model()
    pre_save.connect(_note_new_password, sender=User, dispatch_uid="accounts-new-password")
    post_save.connect(_end_tokens, sender=User, dispatch_uid="accounts-end-tokens")
