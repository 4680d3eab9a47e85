"""The control plane's tables that the other planes read and write with SQL: the written contract.

The Django app `tenants` owns the schema (its models and migrations make these tables, and only
they change them). The broker (`data_plane/`, psycopg), the Spark jobs (`spark/`) and the load
generator (`bench/`) reach the same rows without Django, so each of their SQL strings names a
table through this module, never as a literal (`tests/control_plane/test_tables_contract.py`
fails on a literal, and on a name here that is not one of the models' tables). Renaming a table
therefore starts here, and `git grep tables.NAME` lists every SQL statement it touches.

Each name's docstring says who writes and who reads its rows outside the control plane (which
reads and writes all of them through the ORM).

Plain names, no Django: `common/` imports nothing else of the project.
"""

from __future__ import annotations

# -- tenants and what limits them ------------------------------------------------------------

TENANT = "tenants_tenant"
"""A tenant: slug, status, plan, quota overrides, ACL default, archive switch, budget state.
Read by the broker (tenancy.store, identity, fleet_identity, metering, observers, presence;
storage's persistence, retained_delayed, session_store, archive_decision; the announcements of
shadows and jobs; `__main__`) and by the rules job (spark.rules.store, retry_store). Written by
bench.durable (its own test tenants)."""

PLAN = "tenants_plan"
"""A plan's limits. Read by the broker (tenancy.store, storage.archive_decision) and the rules
job (spark.rules.store); written by bench.durable (its own test plan)."""

HISTORY_POLICY = "tenants_historypolicy"
"""A tenant's topic filters kept for some days in the archive. Read by the broker
(storage.archive_decision)."""

# -- devices and who they are ------------------------------------------------------------------

DEVICE = "tenants_device"
"""A device (name, client-id policy, last seen). Read by the broker (tenancy.store, identity,
jobs.store, shadows.store); written by the broker: last_seen_at and presence (tenancy.observers,
presence), and devices made by fleet provisioning (fleet.store, tenancy.fleet_identity). Read by
bench.presence."""

CREDENTIAL = "tenants_credential"
"""A device's hashed secrets. Read by the broker (tenancy.store)."""

ACL_RULE = "tenants_aclrule"
"""ACL rules. Read by the broker (tenancy.store); written by fleet provisioning (fleet.store:
the rules a template gives a new device)."""

CA_CERTIFICATE = "tenants_cacertificate"
"""A tenant's registered CAs. Read by the broker (tenancy.identity, fleet_identity, fleet.store)."""

DEVICE_CERTIFICATE = "tenants_devicecertificate"
"""Devices' registered certificates. Read by the broker (tenancy.identity)."""

JWT_KEY = "tenants_jwtkey"
"""A tenant's JWT signing keys. Read by the broker (tenancy.identity)."""

DEVICE_GROUP_DEVICES = "tenants_devicegroup_devices"
"""Device groups' members (Django's many-to-many table). Written by fleet provisioning
(fleet.store: the groups a template puts a new device in)."""

FLEET_AUTHORITY = "tenants_fleetauthority"
"""The CA the platform keeps for a tenant's fleet. Read by the broker (fleet.store)."""

FLEET_CERTIFICATE = "tenants_fleetcertificate"
"""Certificates the fleet CA issued. Written by the broker (fleet.store); read by it at CONNECT
(tenancy.fleet_identity)."""

PROVISIONING_TEMPLATE = "tenants_provisioningtemplate"
"""A tenant's provisioning templates. Read by the broker (fleet.store, tenancy.fleet_identity)."""

PROVISIONING_TEMPLATE_GROUPS = "tenants_provisioningtemplate_groups"
"""The groups a template puts devices in (Django's many-to-many table). Read by the broker
(fleet.store)."""

# -- what the broker keeps -----------------------------------------------------------------------

MQTT_SESSION = "tenants_mqttsession"
"""Persistent MQTT sessions. Written and read by the broker (storage.session_store)."""

MQTT_QUEUED_MESSAGE = "tenants_mqttqueuedmessage"
"""Messages queued for offline or slow persistent sessions. Written and read by the broker
(storage.session_store, spilled_payloads); written by bench.durable."""

SHARED_GROUP_QUEUE = "tenants_sharedgroupqueue"
"""Durable shared subscription groups (their messages are `MQTT_QUEUED_MESSAGE` rows under the
group's holder id). Written and read by the broker (storage.group_records)."""

MQTT_STREAM_MARK = "tenants_mqttstreammark"
"""How far a node read a session's stream (the cluster's inheritance). Written and read by the
broker (storage.session_store)."""

RETAINED_MESSAGE = "tenants_retainedmessage"
"""Retained messages. Written and read by the broker (storage.retained_delayed)."""

DELAYED_MESSAGE = "tenants_delayedmessage"
"""Delayed publishes not yet due. Written and read by the broker (storage.retained_delayed)."""

DEVICE_CONNECTION = "tenants_deviceconnection"
"""Live connections and their heartbeats. Written by the broker (tenancy.presence,
session_figures); read by bench.presence."""

SHADOW = "tenants_shadow"
"""Device shadows. Written and read by the broker (shadows.store)."""

SHADOW_VERSION = "tenants_shadowversion"
"""A shadow's history, and the replies a control-plane change announces. Written by the broker
(shadows.store, shadows.announcements)."""

# -- jobs -------------------------------------------------------------------------------------------

JOB = "tenants_job"
"""Jobs. Read and written (state) by the broker (jobs.store)."""

JOB_EXECUTION = "tenants_jobexecution"
"""A job's execution on one device. Written and read by the broker (jobs.store)."""

JOB_METER = "tenants_jobmeter"
"""Job executions metered for billing. Written by the broker (jobs.store)."""

JOB_ANNOUNCEMENT = "tenants_jobannouncement"
"""The replies a control-plane change of a job announces. Written by the broker
(jobs.announcements: what it has sent)."""

# -- usage and billing ------------------------------------------------------------------------------

USAGE = "tenants_usage"
"""Per tenant and minute, the metered figures. Written by the broker (tenancy.metering)."""

DEVICE_USAGE = "tenants_deviceusage"
"""Per device and day, the metered figures. Written by the broker (tenancy.metering)."""

# -- rules ------------------------------------------------------------------------------------------

RULE = "tenants_rule"
"""Rules. Read by the rules job (spark.rules.store, bookkeeping, ledger, retry_store) and by the
broker (storage.archive_decision: an enabled rule's FROM keeps its topics); written by the rules
job (spark.rules.store: pausing a rule)."""

RULE_METRICS = "tenants_rulemetrics"
"""A rule's counters. Written by the rules job (spark.rules.store)."""

RULE_DEAD_LETTER = "tenants_ruledeadletter"
"""Actions that failed for good. Written by the rules job (spark.rules.bookkeeping)."""

RULE_ACTION_LEDGER = "tenants_ruleactionledger"
"""Which outputs' actions were fired (runs over history, new-only). Written and read by the
rules job (spark.rules.ledger)."""

RULE_ACTION_RETRY = "tenants_ruleactionretry"
"""Actions waiting to be retried. Written and read by the rules job (spark.rules.retry_store)."""

RULE_FEED_POSITION = "tenants_rulefeedposition"
"""How far the live rules job has read its live feed. Written and read by the rules job
(spark.rules.feed)."""

AUDIT_ENTRY = "tenants_auditentry"
"""The audit log. Written by the rules job (spark.rules.store: a rule it paused)."""

# -- alarms -----------------------------------------------------------------------------------------

ALARM_DEFINITION = "tenants_alarmdefinition"
"""A tenant's alarm definitions (issue 46). To be read by the live rules job."""

ALARM_STATE = "tenants_alarmstate"
"""Each (alarm, key)'s state. To be written by the live rules job; the control plane writes an
acknowledgement."""

ALARM_TRANSITION = "tenants_alarmtransition"
"""Each key's transitions (its history). To be written by the live rules job; the control plane
writes an acknowledgement's."""

ALARM_NOTIFICATION = "tenants_alarmnotification"
"""The alarms' notifications outbox: written by the live rules job with each transition (it sends
the webhooks and republishes), and by the control plane with an acknowledgement (it sends the
emails)."""

# -- sinks ----------------------------------------------------------------------------------------

SINK_OUTBOX = "tenants_sinkoutbox"
"""Sink outputs waiting for their sink (issue 47). To be written and read by the rules job
(queued, retried, deleted when delivered or dead-lettered); read by the control plane
(`GET /api/v1/sinks`: depth and age)."""

SINK_STATE = "tenants_sinkstate"
"""Each sink's state and counters, per (rule, action_index). To be written by the rules job
(an upsert); read by the control plane."""

ALL = (
    TENANT,
    PLAN,
    HISTORY_POLICY,
    DEVICE,
    CREDENTIAL,
    ACL_RULE,
    CA_CERTIFICATE,
    DEVICE_CERTIFICATE,
    JWT_KEY,
    DEVICE_GROUP_DEVICES,
    FLEET_AUTHORITY,
    FLEET_CERTIFICATE,
    PROVISIONING_TEMPLATE,
    PROVISIONING_TEMPLATE_GROUPS,
    MQTT_SESSION,
    MQTT_QUEUED_MESSAGE,
    SHARED_GROUP_QUEUE,
    MQTT_STREAM_MARK,
    RETAINED_MESSAGE,
    DELAYED_MESSAGE,
    DEVICE_CONNECTION,
    SHADOW,
    SHADOW_VERSION,
    JOB,
    JOB_EXECUTION,
    JOB_METER,
    JOB_ANNOUNCEMENT,
    USAGE,
    DEVICE_USAGE,
    RULE,
    RULE_METRICS,
    RULE_DEAD_LETTER,
    RULE_ACTION_LEDGER,
    RULE_ACTION_RETRY,
    RULE_FEED_POSITION,
    AUDIT_ENTRY,
    ALARM_DEFINITION,
    ALARM_STATE,
    ALARM_TRANSITION,
    ALARM_NOTIFICATION,
    SINK_OUTBOX,
    SINK_STATE,
)
"""Every table above: the names the contract test checks against the models."""
