from django.urls import path, re_path

from tenants.api import (
    account_views,
    acl_views,
    alarm_views,
    billing_views,
    budget_views,
    device_views,
    fleet_views,
    history_views,
    identity_views,
    inspection_views,
    job_artifact_views,
    job_views,
    journey_views,
    rule_run_views,
    rule_views,
    shadow_views,
    shared_group_views,
    sink_views,
    usage_views,
)

urlpatterns = [
    path("signup", account_views.SignupView.as_view(), name="api-signup"),
    path("auth/token", account_views.TokenView.as_view(), name="api-token"),
    path("tenant", account_views.CurrentTenantView.as_view(), name="api-tenant"),
    path("tokens", account_views.ApiTokenListView.as_view(), name="api-tokens"),
    path(
        "tokens/<int:token_id>", account_views.ApiTokenDetailView.as_view(), name="api-token-detail"
    ),
    path("devices", device_views.DeviceListView.as_view(), name="api-devices"),
    path("devices/<str:name>", device_views.DeviceDetailView.as_view(), name="api-device"),
    path(
        "devices/<str:name>/credentials",
        device_views.DeviceCredentialsView.as_view(),
        name="api-device-credentials",
    ),
    path(
        "devices/<str:name>/credentials/<int:credential_id>",
        device_views.DeviceCredentialDetailView.as_view(),
        name="api-device-credential",
    ),
    path(
        "devices/<str:name>/certificates",
        identity_views.DeviceCertificateListView.as_view(),
        name="api-device-certificates",
    ),
    path(
        "devices/<str:name>/certificates/<int:certificate_id>",
        identity_views.DeviceCertificateDetailView.as_view(),
        name="api-device-certificate",
    ),
    path("devices/<str:name>/shadow", shadow_views.ShadowView.as_view(), name="api-shadow"),
    path(
        "devices/<str:name>/shadow/history",
        shadow_views.ShadowHistoryView.as_view(),
        name="api-shadow-history",
    ),
    path(
        "devices/<str:name>/shadows",
        shadow_views.NamedShadowListView.as_view(),
        name="api-named-shadows",
    ),
    path(
        "devices/<str:name>/shadows/<str:shadow>",
        shadow_views.ShadowView.as_view(),
        name="api-named-shadow",
    ),
    path(
        "devices/<str:name>/shadows/<str:shadow>/history",
        shadow_views.ShadowHistoryView.as_view(),
        name="api-named-shadow-history",
    ),
    path("jobs", job_views.JobListView.as_view(), name="api-jobs"),
    # Before jobs/<job_id>: "artifacts" is no job's id (job_services.RESERVED_JOB_IDS).
    path("jobs/artifacts", job_artifact_views.ArtifactListView.as_view(), name="api-artifacts"),
    path(
        "jobs/artifacts/<str:name>",
        job_artifact_views.ArtifactDetailView.as_view(),
        name="api-artifact",
    ),
    path("jobs/<str:job_id>", job_views.JobDetailView.as_view(), name="api-job"),
    path("jobs/<str:job_id>/cancel", job_views.JobCancelView.as_view(), name="api-job-cancel"),
    path("groups", job_views.GroupListView.as_view(), name="api-groups"),
    path("groups/<str:name>", job_views.GroupDetailView.as_view(), name="api-group"),
    path(
        "groups/<str:name>/devices", job_views.GroupDevicesView.as_view(), name="api-group-devices"
    ),
    path("certificates", identity_views.CertificateListView.as_view(), name="api-certificates"),
    path(
        "certificates/import",
        identity_views.CertificateImportView.as_view(),
        name="api-certificates-import",
    ),
    path("cas", identity_views.CaListView.as_view(), name="api-cas"),
    path(
        "cas/registration-code",  # before cas/<name>
        identity_views.CaRegistrationCodeView.as_view(),
        name="api-ca-registration-code",
    ),
    path("cas/<str:name>", identity_views.CaDetailView.as_view(), name="api-ca"),
    path("jwt-keys", identity_views.JwtKeyListView.as_view(), name="api-jwt-keys"),
    path("jwt-keys/<str:kid>", identity_views.JwtKeyDetailView.as_view(), name="api-jwt-key"),
    path(
        "provisioning-templates",
        fleet_views.TemplateListView.as_view(),
        name="api-provisioning-templates",
    ),
    path(
        "provisioning-templates/<str:name>",
        fleet_views.TemplateDetailView.as_view(),
        name="api-provisioning-template",
    ),
    path(
        "provisioning-templates/<str:name>/claims",
        fleet_views.ClaimListView.as_view(),
        name="api-provisioning-claims",
    ),
    path(
        "provisioning-templates/<str:name>/claims/<str:certificate_id>",
        fleet_views.ClaimDetailView.as_view(),
        name="api-provisioning-claim",
    ),
    path("audit", identity_views.AuditView.as_view(), name="api-audit"),
    path("audit.csv", identity_views.AuditCsvView.as_view(), name="api-audit-csv"),
    path("acls", acl_views.AclListView.as_view(), name="api-acls"),
    path("acls/test", acl_views.AclTestView.as_view(), name="api-acls-test"),
    path("acls/<int:rule_id>", acl_views.AclDetailView.as_view(), name="api-acl"),
    path("rules", rule_views.RuleListView.as_view(), name="api-rules"),
    path("rules/test", rule_views.RuleTestView.as_view(), name="api-rule-test"),  # before <name>
    path("rules/<str:name>", rule_views.RuleDetailView.as_view(), name="api-rule"),
    path(
        "rules/<str:name>/dead-letters",
        rule_views.RuleDeadLettersView.as_view(),
        name="api-rule-dead-letters",
    ),
    path(
        "rules/<str:name>/dead-letters/replay",
        rule_views.RuleDeadLettersReplayView.as_view(),
        name="api-rule-dead-letters-replay",
    ),
    path("sessions", inspection_views.SessionListView.as_view(), name="api-sessions"),
    path(  # before sessions/<client_id>: a client id may hold "/" (then it ends in /queue)
        "sessions/<path:client_id>/queue",
        inspection_views.SessionQueueView.as_view(),
        name="api-session-queue",
    ),
    path(
        "sessions/<path:client_id>",
        inspection_views.SessionDetailView.as_view(),
        name="api-session",
    ),
    path("retained", inspection_views.RetainedView.as_view(), name="api-retained"),
    path("topics", inspection_views.TopicTreeView.as_view(), name="api-topics"),
    path(
        "shared-groups", shared_group_views.SharedGroupListView.as_view(), name="api-shared-groups"
    ),
    path(
        "shared-groups/<str:group>",
        shared_group_views.SharedGroupDetailView.as_view(),
        name="api-shared-group",
    ),
    path("history", history_views.HistoryView.as_view(), name="api-history"),
    path(
        "history-policies",
        history_views.HistoryPolicyListView.as_view(),
        name="api-history-policies",
    ),
    path(
        "history-policies/<int:policy_id>",
        history_views.HistoryPolicyDetailView.as_view(),
        name="api-history-policy",
    ),
    path("rules/<str:name>/runs", rule_run_views.RuleRunsView.as_view(), name="api-rule-runs"),
    # Sinks (issue 47): rule actions that deliver through the durable outbox.
    path("sinks", sink_views.SinkListView.as_view(), name="api-sinks"),
    path(
        "rules/<str:name>/actions/<int:number>/test",
        sink_views.SinkTestView.as_view(),
        name="api-rule-action-test",
    ),
    path(
        "rules/<str:name>/runs/<str:run_id>",
        rule_run_views.RuleRunDetailView.as_view(),
        name="api-rule-run",
    ),
    path(
        "rules/<str:name>/runs/<str:run_id>/cancel",
        rule_run_views.RuleRunCancelView.as_view(),
        name="api-rule-run-cancel",
    ),
    # Alarms (issue 46). Before alarms/<name>: "states" and "history" are no alarm's name
    # (alarm_services.RESERVED_ALARM_NAMES); a key may hold "/" (then it ends in /acknowledge).
    path("alarms", alarm_views.AlarmDefinitionListView.as_view(), name="api-alarms"),
    path("alarms/states", alarm_views.AlarmStateListView.as_view(), name="api-alarm-states"),
    path("alarms/history", alarm_views.AlarmDeviceHistoryView.as_view(), name="api-alarm-history"),
    path(
        "alarms/states/<int:state_id>",
        alarm_views.AlarmStateDetailView.as_view(),
        name="api-alarm-state",
    ),
    path(
        "alarms/states/<int:state_id>/acknowledge",
        alarm_views.AlarmAcknowledgeView.as_view(),
        name="api-alarm-state-acknowledge",
    ),
    path(
        "alarms/states/<int:state_id>/history",
        alarm_views.AlarmKeyHistoryView.as_view(),
        name="api-alarm-state-history",
    ),
    path("alarms/<str:name>", alarm_views.AlarmDefinitionDetailView.as_view(), name="api-alarm"),
    path(
        "alarms/<str:name>/preview",
        alarm_views.AlarmPreviewView.as_view(),
        name="api-alarm-preview",
    ),
    path(
        "alarms/<str:name>/states/<path:key>/acknowledge",
        alarm_views.AlarmAcknowledgeByKeyView.as_view(),
        name="api-alarm-key-acknowledge",
    ),
    path(
        "alarms/<str:name>/states/<path:key>/history",
        alarm_views.AlarmKeyHistoryByKeyView.as_view(),
        name="api-alarm-key-history",
    ),
    path(
        "alarms/<str:name>/states/<path:key>",
        alarm_views.AlarmStateByKeyView.as_view(),
        name="api-alarm-key",
    ),
    path(
        "alarm-definitions",
        alarm_views.AlarmDefinitionListAlias.as_view(),
        name="api-alarm-definitions",
    ),
    path(
        "alarm-definitions/<str:name>",
        alarm_views.AlarmDefinitionDetailAlias.as_view(),
        name="api-alarm-definition",
    ),
    path("quota", usage_views.QuotaView.as_view(), name="api-quota"),
    path("usage", usage_views.UsageView.as_view(), name="api-usage"),
    path("usage/explain", usage_views.UsageExplainView.as_view(), name="api-usage-explain"),
    path("usage/forecast", usage_views.UsageForecastView.as_view(), name="api-usage-forecast"),
    path("invoices", billing_views.InvoiceView.as_view(), name="api-invoices"),
    path("budget", budget_views.BudgetView.as_view(), name="api-budget"),
    path("budget/alerts", budget_views.BudgetAlertsView.as_view(), name="api-budget-alerts"),
    path("billing-details", budget_views.BillingDetailsView.as_view(), name="api-billing-details"),
    path("journey", journey_views.JourneyView.as_view(), name="api-journey"),
    path(
        "clients/<str:client_id>/events",
        journey_views.ClientEventsView.as_view(),
        name="api-client-events",
    ),
    re_path(
        r"^invoices/(?P<period>[0-9]{4}-[0-9]{2})(?:\.(?P<fmt>csv|pdf))?$",
        billing_views.InvoiceDetailView.as_view(),
        name="api-invoice",
    ),
]
