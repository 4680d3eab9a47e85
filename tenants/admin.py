"""Django admin for operators. Writes that the broker must hear about go through the services."""

from django.contrib import admin

from tenants.devices import services as device_services
from tenants.models import (
    AclRule,
    Credential,
    Credit,
    Device,
    Invoice,
    Membership,
    Plan,
    PriceBook,
    Rule,
    Tenant,
)
from tenants.tenant import services as tenant_services


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "monthly_price_cents", "max_connections", "max_publish_rate")


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "status", "plan", "created_at")
    list_filter = ("status", "plan")
    search_fields = ("slug", "name")
    inlines = [MembershipInline]
    actions = ["suspend", "activate"]

    def save_model(self, request, obj, form, change):
        if change and "plan" in form.changed_data:
            # A plan change from the admin goes through the service: it keeps the history the
            # billing job prorates the base fee with.
            before = Tenant.objects.get(pk=obj.pk)
            new_plan, obj.plan = obj.plan, before.plan
            super().save_model(request, obj, form, change)
            tenant_services.tenant_change_plan(obj, new_plan.slug)
            return
        super().save_model(request, obj, form, change)
        if change and {"status", "quota_overrides", "acl_default"} & set(form.changed_data):
            from common.contracts.notifications import ChangeKind
            from tenants.notify import announce

            announce(
                obj.slug,
                ChangeKind.TENANT_STATUS
                if "status" in form.changed_data
                else ChangeKind.TENANT_QUOTA,
            )

    @admin.action(description="Suspend selected tenants")
    def suspend(self, request, queryset):
        for tenant in queryset:
            tenant_services.tenant_set_status(tenant, Tenant.Status.SUSPENDED)

    @admin.action(description="Activate selected tenants")
    def activate(self, request, queryset):
        for tenant in queryset:
            tenant_services.tenant_set_status(tenant, Tenant.Status.ACTIVE)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("user__email", "tenant__slug")


class CredentialInline(admin.TabularInline):
    model = Credential
    extra = 0
    can_delete = False
    readonly_fields = ("secret_hash", "created_at", "expires_at", "revoked_at")

    def has_add_permission(self, request, obj=None):
        return False  # secrets are issued through rotation, never typed in


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "enabled", "client_id_policy", "last_seen_at")
    list_filter = ("enabled", "client_id_policy", "tenant")
    search_fields = ("name", "tenant__slug")
    inlines = [CredentialInline]

    def save_model(self, request, obj, form, change):
        if change and "plan" in form.changed_data:
            # A plan change from the admin goes through the service: it keeps the history the
            # billing job prorates the base fee with.
            before = Tenant.objects.get(pk=obj.pk)
            new_plan, obj.plan = obj.plan, before.plan
            super().save_model(request, obj, form, change)
            tenant_services.tenant_change_plan(obj, new_plan.slug)
            return
        super().save_model(request, obj, form, change)
        if change:
            from common.contracts.notifications import ChangeKind
            from tenants.notify import announce

            kind = ChangeKind.DEVICE_UPDATED
            if "enabled" in form.changed_data:
                kind = ChangeKind.DEVICE_ENABLED if obj.enabled else ChangeKind.DEVICE_DISABLED
            announce(obj.tenant.slug, kind, device=obj.name, ids=[obj.id])

    def delete_model(self, request, obj):
        device_services.device_delete(obj)


@admin.register(AclRule)
class AclRuleAdmin(admin.ModelAdmin):
    list_display = ("tenant", "position", "device", "action", "permission", "topic")
    list_filter = ("tenant", "permission", "action")


@admin.register(Rule)
class RuleAdmin(admin.ModelAdmin):
    list_display = ("tenant", "name", "enabled", "updated_at")
    list_filter = ("enabled", "tenant")


@admin.register(PriceBook)
class PriceBookAdmin(admin.ModelAdmin):
    """Price books are versions: add a new one (from a date) rather than editing the old."""

    list_display = ("plan", "version", "effective_from", "currency", "base_fee_cents")
    list_filter = ("plan",)

    def get_readonly_fields(self, request, obj=None):
        return (
            ("plan", "version", "effective_from", "currency", "base_fee_cents", "dimensions")
            if obj
            else ("version",)
        )

    def save_model(self, request, obj, form, change):
        if change:
            return  # versions are immutable
        from django.contrib import messages
        from django.core.exceptions import ValidationError

        from tenants.billing import services as billing

        try:
            created = billing.price_book_set(
                obj.plan,
                effective_from=obj.effective_from,
                dimensions=obj.dimensions,
                base_fee_cents=obj.base_fee_cents,
                currency=obj.currency,
            )
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
            return
        obj.pk, obj.version = created.pk, created.version


@admin.register(Invoice)
class InvoiceAdmin(admin.ModelAdmin):
    """Invoices by status with their totals; the revenue per month above the list."""

    list_display = (
        "number",
        "tenant",
        "period",
        "status",
        "total",
        "currency",
        "price_book_version",
        "issued_at",
    )
    list_filter = ("status", "period", "currency")
    search_fields = ("tenant__slug", "number")
    readonly_fields = [f.name for f in Invoice._meta.fields]
    ordering = ("-period", "status", "tenant__slug")

    @admin.display(description="total", ordering="total_cents")
    def total(self, obj):
        return f"{obj.total_cents / 100:,.2f}"

    def has_add_permission(self, request):
        return False  # invoices come from the billing job

    def changelist_view(self, request, extra_context=None):
        from tenants.billing.selectors import revenue_by_period

        extra = {"revenue": revenue_by_period()[:12], **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)


@admin.register(Credit)
class CreditAdmin(admin.ModelAdmin):
    """Credits are taken off the period's invoice by the next billing run (drafts only)."""

    list_display = ("tenant", "period", "amount_cents", "reason", "created_at")
    list_filter = ("period",)
    search_fields = ("tenant__slug", "reason")
