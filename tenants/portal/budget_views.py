"""Portal pages for spend: Budget (set it, the month to date against it, the alerts sent) and
Billing details (who invoices are addressed to). Thin: the services and selectors of
`tenants.budgets.services`, `tenants.billing.details`, `tenants.budgets.selectors` do the work."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render

from tenants.billing import details as billing_details
from tenants.billing.invoice_words import money
from tenants.budgets import selectors as budget_selectors
from tenants.budgets import services as budgets
from tenants.budgets.alerts import alert_words
from tenants.portal.views import _context, _form_errors, tenant_view

SECRET_ONCE = "portal_budget_secret_once"


class BudgetForm(forms.Form):
    amount = forms.CharField(
        label="Monthly budget", max_length=20, help_text="In the plan's currency, e.g. 25.00."
    )
    thresholds = forms.CharField(
        label="Alert at (percent)",
        initial="50, 80, 100",
        max_length=60,
        help_text="Comma-separated: an email (and webhook) once per threshold per month.",
    )
    at_limit = forms.ChoiceField(
        label="At 100 %",
        choices=[
            ("notify", "Notify only: devices keep connecting"),
            ("degrade", "Degrade: refuse new connections; connected devices keep working"),
        ],
        initial="notify",
    )
    webhook_url = forms.CharField(
        label="Webhook URL (optional)",
        required=False,
        max_length=2048,
        help_text="Alerts are POSTed there as JSON, signed with X-Signature-256.",
    )
    rotate_webhook_secret = forms.BooleanField(
        label="Issue a new webhook signing secret", required=False
    )

    def clean_amount(self) -> int:
        raw = self.cleaned_data["amount"].strip().replace(",", "")
        try:
            amount = Decimal(raw)
        except InvalidOperation:
            raise forms.ValidationError(f"{raw!r} is not an amount, e.g. 25.00.") from None
        if not amount.is_finite() or amount != amount.quantize(Decimal("0.01")):
            raise forms.ValidationError("Use at most two decimals, e.g. 25.00.")
        return int(amount * 100)

    def clean_thresholds(self) -> list:
        parts = [p.strip().rstrip("%").strip() for p in self.cleaned_data["thresholds"].split(",")]
        out = []
        for part in parts:
            if not part:
                continue
            if not part.isdigit():
                raise forms.ValidationError(f"{part!r} is not a whole percentage.")
            out.append(int(part))
        return out


class BillingDetailsForm(forms.Form):
    company_name = forms.CharField(label="Company name", required=False, max_length=200)
    address = forms.CharField(
        required=False, max_length=1000, widget=forms.Textarea(attrs={"rows": 4})
    )
    country = forms.CharField(required=False, max_length=64)
    tax_id = forms.CharField(label="Tax ID (VAT number)", required=False, max_length=64)
    email = forms.CharField(label="Billing email", required=False, max_length=254)
    purchase_order = forms.CharField(label="Purchase order", required=False, max_length=64)


def _budget_initial(status: dict) -> dict:
    if status["monthly_cents"] is None:
        return {}
    cents = status["monthly_cents"]
    return {
        "amount": f"{cents // 100}.{cents % 100:02d}",
        "thresholds": ", ".join(str(t) for t in status["thresholds"]),
        "at_limit": status["at_limit"],
        "webhook_url": status["webhook_url"] or "",
    }


@tenant_view()
def budget(request, membership):
    tenant = membership.tenant
    form = None
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        if request.POST.get("delete"):
            budgets.budget_delete(tenant)
            messages.success(request, "Budget removed: new connections are accepted.")
            return redirect("portal:budget")
        form = BudgetForm(request.POST)
        if form.is_valid():
            data = dict(form.cleaned_data)
            data["monthly_cents"] = data.pop("amount")
            try:
                _, secret = budgets.budget_set(tenant, data)
            except ValidationError as error:
                _form_errors(form, error)
            else:
                if secret:
                    request.session[SECRET_ONCE] = secret
                messages.success(request, "Budget saved.")
                return redirect("portal:budget")
    status = budget_selectors.budget_status(tenant=tenant)
    if form is None:
        form = BudgetForm(initial=_budget_initial(status))
    currency = status["currency"]
    alerts = [
        (alert, alert_words(alert)[1]) for alert in budget_selectors.alerts_list(tenant=tenant)[:50]
    ]
    return render(
        request,
        "portal/budget.html",
        _context(
            membership,
            form=form,
            status=status,
            spend=money(status["spend_cents"], currency),
            budget_amount=status["monthly_cents"] is not None
            and money(status["monthly_cents"], currency),
            meter=min(100, status["percent"] or 0),
            alerts=alerts,
            secret=request.session.pop(SECRET_ONCE, None),
        ),
    )


@tenant_view()
def billing_details_page(request, membership):
    tenant = membership.tenant
    details = billing_details.billing_details_get(tenant=tenant)
    form = BillingDetailsForm(
        initial={key: getattr(details, key) for key in billing_details.FIELDS}
    )
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = BillingDetailsForm(request.POST)
        if form.is_valid():
            try:
                billing_details.billing_details_set(tenant, form.cleaned_data)
            except ValidationError as error:
                _form_errors(form, error)
            else:
                messages.success(request, "Billing details saved: the next invoice shows them.")
                return redirect("portal:billing-details")
    return render(request, "portal/billing_details.html", _context(membership, form=form))
