"""Portal pages for one's own account: signing up, logging in and out, switching tenant,
confirming the email address (the link mailed at signup, and "send it again" from the banner
every page shows until then), changing the password, and one's API tokens for the tenant."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import authenticate, login, logout
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render, resolve_url
from django.urls import reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from tenants.accounts import selectors as account_selectors
from tenants.accounts import services as account_services
from tenants.accounts import throttles
from tenants.accounts import trust as accounts
from tenants.client_address import client_address
from tenants.portal.forms import LoginForm, SignupForm, TokenForm
from tenants.portal.views import _context, _form_errors, tenant_view


def email_verify(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    """The link in the confirmation email. It confirms the address of the account it was made
    for, and only while logged in as that account: the mailbox alone (or a mail scanner
    following links) proves nothing about who made the account."""
    if not request.user.is_authenticated:
        messages.info(request, "Log in to confirm your email address.")
        return redirect_to_login(request.get_full_path(), resolve_url("portal:login"))
    user = accounts.user_from_uid(uidb64)
    if user is not None and user.pk != request.user.pk:
        return render(
            request,
            "portal/email_verify.html",
            {**_tenant_context(request), "wrong_account": True, "for_email": user.email},
            status=403,
        )
    if accounts.is_verified(request.user):
        messages.info(request, f"{request.user.email} is already confirmed.")
        return redirect("portal:dashboard")
    if user is None or not accounts.verify(user, token):
        return render(
            request,
            "portal/email_verify.html",
            {**_tenant_context(request), "expired": True},
            status=400,
        )
    messages.success(request, f"{user.email} is confirmed. Thank you.")
    return redirect("portal:dashboard")


@require_POST
def email_verify_resend(request: HttpRequest) -> HttpResponse:
    """The banner's "Send the link again": a few per hour per account (bounded mail)."""
    if not request.user.is_authenticated:
        return redirect_to_login(resolve_url("portal:dashboard"), resolve_url("portal:login"))
    user = request.user
    back = _back(request)
    if accounts.is_verified(user):
        messages.info(request, f"{user.email} is already confirmed.")
        return redirect(back)
    wait = throttles.hit("verify-resend", str(user.pk), f"{accounts.RESEND_LIMIT}/h")
    if wait:
        minutes = int(wait // 60) + 1
        messages.error(
            request,
            f"A link went to {user.email} a short while ago: look for it (and in the spam "
            f"folder), or try again in {minutes} min.",
        )
        return redirect(back)
    url = request.build_absolute_uri(accounts.verification_path(user))
    if accounts.verification_mail_quietly(user, url):
        messages.success(request, f"We sent a new link to {user.email}.")
    else:
        messages.error(request, "The mail server did not take the email: try again later.")
    return redirect(back)


def _tenant_context(request: HttpRequest) -> dict:
    """The header of the tenant the person is in, on these pages that are not a tenant's."""
    membership = account_selectors.current_membership(request.user, request.session.get("tenant"))
    return _context(membership) if membership is not None else {}


def _back(request: HttpRequest) -> str:
    target = request.POST.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return resolve_url("portal:dashboard")


class PasswordChangeView(auth_views.PasswordChangeView):
    """A new password keeps this session and ends every other one and every API token of the
    account (tenants.accounts.trust)."""

    template_name = "portal/password_change.html"
    success_url = reverse_lazy("portal:dashboard")

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), **_tenant_context(self.request)}

    def form_valid(self, form):
        response = super().form_valid(form)
        messages.success(
            self.request,
            "Password changed. Every other session and every API token of this account has "
            "ended: create new tokens where you need them.",
        )
        return response


def signup(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST or None)
    if request.method == "POST" and throttles.login_wait(request.META, None):
        form.is_valid()
        form.add_error(None, "Too many attempts: try again in a minute.")
        return render(request, "portal/signup.html", {"form": form}, status=429)
    if request.method == "POST" and form.is_valid():
        try:
            tenant, user, _ = account_services.signup(
                **form.cleaned_data, api_token=False, address=client_address(request.META)
            )
        except ValidationError as error:
            _form_errors(form, error)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            request.session["tenant"] = tenant.slug
            # The tenant is the account's own at once; the address is proved by the link mailed
            # now (the banner says so until then, tenants.accounts.trust).
            accounts.verification_mail_quietly(
                user, request.build_absolute_uri(accounts.verification_path(user))
            )
            messages.success(request, f"Welcome! Tenant {tenant.slug} is ready.")
            return redirect("portal:dashboard")
    return render(request, "portal/signup.html", {"form": form})


def login_view(request: HttpRequest) -> HttpResponse:
    form = LoginForm(request.POST or None)
    if request.method == "POST":
        # The same throttle as the API's token endpoint: per address, per account.
        wait = throttles.login_wait(request.META, request.POST.get("email"))
        if wait:
            form.is_valid()
            form.add_error(None, f"Too many attempts: try again in {int(wait) + 1} s.")
            return render(request, "portal/login.html", {"form": form}, status=429)
    if request.method == "POST" and form.is_valid():
        email = form.cleaned_data["email"].strip().lower()
        user = authenticate(request, username=email, password=form.cleaned_data["password"])
        if user is None:
            form.add_error(None, "Wrong email or password.")
        else:
            login(request, user)
            return redirect(_safe_next(request))
    return render(request, "portal/login.html", {"form": form})


def _safe_next(request: HttpRequest) -> str:
    """`?next=` only when it stays on this site (no open redirect); else the dashboard."""
    target = request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return resolve_url("portal:dashboard")


@require_POST
def logout_view(request: HttpRequest) -> HttpResponse:
    logout(request)
    return redirect("portal:login")


@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    slug = request.POST.get("tenant", "")
    if account_selectors.is_member(request.user, slug):
        request.session["tenant"] = slug
    return redirect("portal:dashboard")


@tenant_view()
def tokens(request, membership):
    form = TokenForm()
    created = None
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = TokenForm(request.POST)
        if form.is_valid():
            _, created = account_services.api_token_create(
                user=request.user, tenant=membership.tenant, name=form.cleaned_data["name"]
            )
            form = TokenForm()
    listed = account_selectors.api_tokens_list(tenant=membership.tenant, user=request.user)
    return render(
        request,
        "portal/tokens.html",
        _context(membership, tokens=listed, form=form, created=created),
    )


@require_POST
@tenant_view(write=True)
def token_delete(request, membership, token_id: int):
    token = account_selectors.api_token_get(
        tenant=membership.tenant, user=request.user, token_id=token_id
    )
    if token is None:
        raise Http404("No such token.")
    account_services.api_token_delete(token)
    messages.success(request, "Token deleted.")
    return redirect("portal:tokens")
