from django.urls import path, re_path

from tenants.portal import account_views, billing_views, people_views, trust_views, views

app_name = "portal"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("signup/", views.signup, name="signup"),
    path("login/", views.login_view, name="login"),
    path("logout/", views.logout_view, name="logout"),
    path("switch/", views.switch_tenant, name="switch"),
    path("devices/", views.devices, name="devices"),
    path("devices/<str:name>/", views.device_detail, name="device"),
    path("devices/<str:name>/rotate/", views.device_rotate, name="device-rotate"),
    path(
        "devices/<str:name>/credentials/<int:credential_id>/retire/",
        views.credential_retire,
        name="credential-retire",
    ),
    path("devices/<str:name>/toggle/", views.device_toggle, name="device-toggle"),
    path("devices/<str:name>/delete/", views.device_delete, name="device-delete"),
    path("live/", views.live, name="live"),
    path("start/", views.onboarding, name="onboarding"),
    path("client/", views.client, name="client"),
    path("client/token/", views.client_token, name="client-token"),
    path("acls/", views.acls, name="acls"),
    path("acls/<int:rule_id>/delete/", views.acl_delete, name="acl-delete"),
    path("rules/", views.rules, name="rules"),
    path("rules/new/", views.rule_new, name="rule-new"),
    path("rules/<str:name>/", views.rule_detail, name="rule"),
    path("rules/<str:name>/delete/", views.rule_delete, name="rule-delete"),
    path(
        "rules/<str:name>/dead-letters/replay/",
        views.rule_dead_letters_replay,
        name="rule-dead-letters-replay",
    ),
    path(
        "rules/<str:name>/dead-letters/clear/",
        views.rule_dead_letters_clear,
        name="rule-dead-letters-clear",
    ),
    path("quota/", views.quota, name="quota"),
    path("usage/", billing_views.usage, name="usage"),
    path("invoices/", billing_views.invoices, name="invoices"),
    re_path(
        r"^invoices/(?P<period>[0-9]{4}-[0-9]{2})\.(?P<fmt>csv|pdf)$",
        billing_views.invoice_download,
        name="invoice-download",
    ),
    path("members/", people_views.members, name="members"),
    path("members/<int:member_id>/remove/", people_views.member_remove, name="member-remove"),
    path(
        "members/invitations/<int:invitation_id>/revoke/",
        people_views.invitation_revoke,
        name="invitation-revoke",
    ),
    path(
        "members/invitations/<int:invitation_id>/resend/",
        people_views.invitation_resend,
        name="invitation-resend",
    ),
    path("invite/<str:token>/", people_views.invite_accept, name="invite-accept"),
    path("operator/", people_views.operator, name="operator"),
    path("password-reset/", people_views.PasswordResetView.as_view(), name="password-reset"),
    path(
        "password-reset/sent/",
        people_views.PasswordResetDoneView.as_view(),
        name="password-reset-done",
    ),
    path(
        "reset/<uidb64>/<token>/",
        people_views.PasswordResetConfirmView.as_view(),
        name="password-reset-confirm",
    ),
    path(
        "account/verify/resend/",
        account_views.email_verify_resend,
        name="email-verify-resend",
    ),
    path(
        "account/verify/<uidb64>/<token>/",
        account_views.email_verify,
        name="email-verify",
    ),
    path(
        "account/password/",
        account_views.PasswordChangeView.as_view(),
        name="password-change",
    ),
    path("identity/", trust_views.identity_page, name="identity"),
    path("identity/cas/<str:name>/revoke/", trust_views.ca_revoke, name="ca-revoke"),
    path("identity/keys/<str:kid>/revoke/", trust_views.jwt_key_revoke, name="jwt-key-revoke"),
    path("audit/", trust_views.audit_page, name="audit"),
    path("audit.csv", trust_views.audit_csv, name="audit-csv"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/delete/", views.token_delete, name="token-delete"),
]
