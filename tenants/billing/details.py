"""A tenant's billing details: who its invoices are addressed to (copied onto each invoice when it
is issued, `tenants.billing.invoicing.billed_to`)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from tenants.models import BillingDetails, Tenant

# Field → most characters (the address may hold several lines).
FIELDS = {
    "company_name": 200,
    "address": 1000,
    "country": 64,
    "tax_id": 64,
    "email": 254,
    "purchase_order": 64,
}


def billing_details_get(*, tenant: Tenant) -> BillingDetails:
    """The tenant's details (blank ones, unsaved, when it gave none)."""
    return BillingDetails.objects.filter(tenant=tenant).first() or BillingDetails(tenant=tenant)


@transaction.atomic
def billing_details_set(tenant: Tenant, data: dict[str, Any]) -> BillingDetails:
    """Replace the given fields (others keep their value); each a string, "" clears it."""
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": ["Send a JSON object."]})
    errors: dict[str, list[str]] = {}
    for key in sorted(set(data) - set(FIELDS)):
        errors[key] = [f"Not a billing detail; fields: {', '.join(FIELDS)}."]
    for key, most in FIELDS.items():
        if key not in data:
            continue
        value = data[key]
        if value is None:
            continue
        if not isinstance(value, str) or len(value) > most or "\x00" in value:
            errors[key] = [f"Must be text of at most {most} characters."]
        elif key != "address" and any(c in value for c in "\r\n"):
            errors[key] = ["Must be one line."]
        elif key == "email" and value:
            try:
                validate_email(value)
            except ValidationError:
                errors[key] = [f"{value!r} is not an email address."]
    if errors:
        raise ValidationError(errors)
    details = BillingDetails.objects.select_for_update().filter(
        tenant=tenant
    ).first() or BillingDetails(tenant=tenant)
    for key in FIELDS:
        if key in data:
            setattr(details, key, (data[key] or "").strip())
    details.updated_at = timezone.now()
    details.save()
    return details
