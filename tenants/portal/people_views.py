"""Portal pages for people: members and invitations, accepting an invitation, password reset
(Django's auth views), and the operators' overview for staff users."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.views.decorators.http import require_POST

from tenants import operator_overview
from tenants.accounts import throttles
from tenants.accounts import trust as accounts
from tenants.models import Membership
from tenants.people import selectors as people_selectors
from tenants.people import services as people
from tenants.portal.forms import InviteForm, PasswordChoiceForm
from tenants.portal.views import _context, _form_errors, tenant_view


@tenant_view()
def members(request, membership):
    tenant = membership.tenant
    is_owner = membership.role == Membership.Role.OWNER
    form = InviteForm(offer_owner=is_owner)
    status = 200
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = InviteForm(request.POST, offer_owner=is_owner)
        if form.is_valid():
            try:
                invitation, _ = people.invitation_create(
                    tenant=tenant,
                    invited_by=request.user,
                    accept_url=lambda token: request.build_absolute_uri(
                        reverse("portal:invite-accept", args=[token])
                    ),
                    **form.cleaned_data,
                )
            except ValidationError as error:
                _form_errors(form, error)
            except people.MailNotSent as error:
                messages.error(request, str(error))
                return redirect("portal:members")
            else:
                messages.success(request, f"Invitation sent to {invitation.email}.")
                return redirect("portal:members")
        status = 400
    return render(
        request,
        "portal/members.html",
        _context(
            membership,
            members=people_selectors.members_list(tenant=tenant),
            invitations=people_selectors.invitations_open(tenant=tenant),
            form=form,
            is_owner=is_owner,
        ),
        status=status,
    )


@tenant_view(write=True)
def member_remove(request, membership, member_id: int):
    target = people_selectors.member_get(tenant=membership.tenant, member_id=member_id)
    if target is None:
        raise Http404("No such member.")
    if request.method != "POST":
        return render(request, "portal/member_remove.html", _context(membership, member=target))
    try:
        people.membership_remove(target, by=membership)
    except ValidationError as error:
        messages.error(request, "; ".join(sum(error.message_dict.values(), [])))
        return redirect("portal:members")
    messages.success(
        request, f"{target.user.email} no longer has access to {membership.tenant.slug}."
    )
    if target.id == membership.id:
        return redirect("portal:login")
    return redirect("portal:members")


@require_POST
@tenant_view(write=True)
def invitation_resend(request, membership, invitation_id: int):
    """Send an open invitation again (a new link), e.g. after the mail server was down."""
    invitation = people_selectors.invitation_get(
        tenant=membership.tenant, invitation_id=invitation_id
    )
    if invitation is None:
        raise Http404("No such invitation.")
    try:
        people.invitation_resend(
            invitation,
            accept_url=lambda token: request.build_absolute_uri(
                reverse("portal:invite-accept", args=[token])
            ),
        )
    except ValidationError as error:
        messages.error(request, "; ".join(sum(error.message_dict.values(), [])))
    except people.MailNotSent as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Invitation sent again to {invitation.email}.")
    return redirect("portal:members")


@require_POST
@tenant_view(write=True)
def invitation_revoke(request, membership, invitation_id: int):
    invitation = people_selectors.invitation_get(
        tenant=membership.tenant, invitation_id=invitation_id
    )
    if invitation is None:
        raise Http404("No such invitation.")
    people.invitation_revoke(invitation)
    messages.success(request, f"Invitation for {invitation.email} withdrawn.")
    return redirect("portal:members")


def invite_accept(request, token: str):
    """The link in the invitation email. Logged in as the invited address: join. No account
    yet: choose a password. Another account: log out first."""
    invitation = people_selectors.invitation_by_token(token)
    if invitation is None:
        raise Http404("No such invitation.")
    context = {"invitation": invitation, "form": PasswordChoiceForm()}
    if not invitation.is_open:
        return render(request, "portal/invite.html", {**context, "closed": True}, status=410)
    user = request.user if request.user.is_authenticated else None
    has_account = people_selectors.account_exists(invitation.email)
    if request.method == "POST":
        try:
            if user is not None:
                people.invitation_accept(invitation, user)
            else:
                form = PasswordChoiceForm(request.POST)
                context["form"] = form
                if not form.is_valid():
                    return render(request, "portal/invite.html", context, status=400)
                user = people.invitation_accept_new_user(invitation, form.cleaned_data["password"])
                login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        except ValidationError as error:
            _form_errors(context["form"], error)
            return render(request, "portal/invite.html", context, status=400)
        except PermissionDenied as error:
            return render(
                request, "portal/invite.html", {**context, "wrong_user": str(error)}, status=403
            )
        request.session["tenant"] = invitation.tenant.slug
        messages.success(request, f"Welcome to {invitation.tenant.slug}.")
        return redirect("portal:dashboard")
    return render(request, "portal/invite.html", {**context, "has_account": has_account})


@login_required
def operator(request):
    """For staff users (operators): every tenant with its status, connections and usage."""
    if not request.user.is_staff:
        raise PermissionDenied("Operators only.")
    now = timezone.now()
    rows = operator_overview.tenants_overview(now=now)
    return render(
        request,
        "portal/operator.html",
        {
            "rows": rows,
            "totals": {
                "tenants": len(rows),
                "connections": sum(r["connections"] for r in rows),
                "messages_in": sum(r["messages_in"] for r in rows),
            },
            "now": now,
        },
    )


class PasswordResetView(auth_views.PasswordResetView):
    """Throttled per address and per account named, silently: past either budget no mail goes,
    and the answer is the same "check your mail" page (no hint of accounts or limits)."""

    template_name = "portal/password_reset.html"
    email_template_name = "portal/password_reset_email.txt"
    subject_template_name = "portal/password_reset_subject.txt"
    success_url = reverse_lazy("portal:password-reset-done")

    def form_valid(self, form):
        if throttles.reset_allowed(self.request.META, form.cleaned_data["email"]):
            return super().form_valid(form)
        return HttpResponseRedirect(self.get_success_url())


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    template_name = "portal/password_reset_done.html"


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    """Also the one-time login link of `create_tenant --owner`: choosing a password logs in."""

    template_name = "portal/password_reset_confirm.html"
    post_reset_login = True
    post_reset_login_backend = "django.contrib.auth.backends.ModelBackend"
    success_url = reverse_lazy("portal:dashboard")

    def form_valid(self, form):
        # The link came to the address: it is proved. The new password (tenants.accounts.trust) has
        # ended every API token and every other session the account had.
        response = super().form_valid(form)
        accounts.mark_verified(form.user)
        return response
