"""The quota keys of CONTRACT.md: plan columns, override keys, and what the broker enforces.
Pure Python, so the broker (no Django) and the models share one list."""

QUOTA_KEYS = (
    "max_connections",
    "max_publish_rate",
    "max_inbound_bytes_rate",
    "max_outbound_bytes_rate",
    "max_message_size",
    "max_subscriptions_per_client",
    "max_queued_messages",
    "max_retained_messages",
    "max_session_expiry",
    "max_keepalive",
    "max_persistent_sessions",
    "max_device_publish_rate",
    # The rules job's: outputs one rule may make of one message (FOREACH), each an action run.
    "max_rule_outputs",
    # History (issue 31): the days one history policy may keep, and how many policies a tenant
    # may have. Enforced by the control plane (the broker archives what policies ask for).
    "max_history_days",
    "max_history_policies",
    # Device shadows (AWS IoT's): bytes of one shadow's state (desired + reported, as AWS
    # counts them: 8 KiB by default), and days each shadow's past versions are kept.
    "max_shadow_size",
    "shadow_history_days",
    # Every stored byte capped (issue 44): shadows (classic and named) a tenant keeps, past
    # versions kept per shadow (the oldest beyond go as a new one is written), and certificates
    # (CAs, devices' certificates, fleet claims and what they issued; revoked ones not counted).
    "max_shadows",
    "max_shadow_versions",
    "max_certificates",
    # Device identity (issue 44): the CA certificates a tenant may have registered (live ones;
    # the platform's own fleet CA not counted). Enforced by the control plane at registration;
    # it bounds what a failing mTLS CONNECT can make the broker look through.
    "max_ca_certificates",
    # Durable shared groups (issue 45): groups per tenant, and what one group keeps while no
    # member is online (messages, payload bytes, seconds). Enforced by the broker.
    "max_shared_groups",
    "max_group_messages",
    "max_group_bytes",
    "group_retention",
    # Alarms (issue 46): alarm definitions per tenant (enforced by the control plane when one is
    # created), and the keys their states are kept for, all alarms together (the live job).
    "max_alarms",
    "max_alarm_keys",
    # Sinks (issue 47): what one sink (a rule action that delivers through the durable outbox)
    # keeps waiting while its far end is down or slow: outputs, and bytes of their JSON. The
    # rules job enforces them.
    "max_sink_outbox_messages",
    "max_sink_outbox_bytes",
)
