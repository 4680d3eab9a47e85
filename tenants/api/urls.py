from django.urls import path, re_path

from tenants.api import views

urlpatterns = [
    path("signup", views.SignupView.as_view(), name="api-signup"),
    path("auth/token", views.TokenView.as_view(), name="api-token"),
    path("tenant", views.CurrentTenantView.as_view(), name="api-tenant"),
    path("tokens", views.ApiTokenListView.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>", views.ApiTokenDetailView.as_view(), name="api-token-detail"),
    path("devices", views.DeviceListView.as_view(), name="api-devices"),
    path("devices/<str:name>", views.DeviceDetailView.as_view(), name="api-device"),
    path(
        "devices/<str:name>/credentials",
        views.DeviceCredentialsView.as_view(),
        name="api-device-credentials",
    ),
    path(
        "devices/<str:name>/credentials/<int:credential_id>",
        views.DeviceCredentialDetailView.as_view(),
        name="api-device-credential",
    ),
    path("acls", views.AclListView.as_view(), name="api-acls"),
    path("acls/test", views.AclTestView.as_view(), name="api-acls-test"),
    path("acls/<int:rule_id>", views.AclDetailView.as_view(), name="api-acl"),
    path("rules", views.RuleListView.as_view(), name="api-rules"),
    path("rules/test", views.RuleTestView.as_view(), name="api-rule-test"),  # before <name>
    path("rules/<str:name>", views.RuleDetailView.as_view(), name="api-rule"),
    path(
        "rules/<str:name>/dead-letters",
        views.RuleDeadLettersView.as_view(),
        name="api-rule-dead-letters",
    ),
    path(
        "rules/<str:name>/dead-letters/replay",
        views.RuleDeadLettersReplayView.as_view(),
        name="api-rule-dead-letters-replay",
    ),
    path("quota", views.QuotaView.as_view(), name="api-quota"),
    path("usage", views.UsageView.as_view(), name="api-usage"),
    path("invoices", views.InvoiceView.as_view(), name="api-invoices"),
    re_path(
        r"^invoices/(?P<period>[0-9]{4}-[0-9]{2})(?:\.(?P<fmt>csv|pdf))?$",
        views.InvoiceDetailView.as_view(),
        name="api-invoice",
    ),
]
