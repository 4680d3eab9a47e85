"""The OpenAPI document's words: each operation's summary and description, grouped by resource
(tags). Applied by a drf-spectacular post-processing hook, so every operation of the generated
schema has them; `tests/api/test_openapi_docs.py` checks that none is missing or generic."""

from __future__ import annotations

from tenants.api.alarm_docs import ALARM_OPERATIONS, ALARMS_TAG
from tenants.api.fleet_docs import FLEET_OPERATIONS, FLEET_TAG
from tenants.api.inspection_docs import INSPECTION_OPERATIONS, INSPECTION_TAG
from tenants.api.job_docs import JOB_OPERATIONS, JOB_TAGS
from tenants.api.journey_docs import JOURNEY_OPERATIONS, JOURNEY_TAG
from tenants.api.shared_group_docs import SHARED_GROUP_OPERATIONS
from tenants.api.sink_docs import SINK_OPERATIONS

TAGS = [
    {"name": "Accounts", "description": "Sign up and get API tokens with an email and password."},
    {"name": "Tenant", "description": "The caller's tenant: its settings, plan and API tokens."},
    {
        "name": "Devices",
        "description": "Devices connect over MQTT as `tenant/device` with a platform-made secret.",
    },
    {
        "name": "Credentials",
        "description": "A device's secrets. A device may hold two: rotating issues a new one and "
        "keeps the previous one for a grace period, so devices move over without downtime.",
    },
    {"name": "ACLs", "description": "Ordered allow/deny rules on topics, and a tester."},
    {"name": "Rules", "description": "SQL rules over the tenant's messages, and their actions."},
    {
        "name": "History",
        "description": "What the archive keeps of the tenant's messages, for how long, and what "
        "it stores: history policies (topic filters kept for some days).",
    },
    {"name": "Quota and usage", "description": "Limits the broker enforces, and what was used."},
    {"name": "Invoices", "description": "Monthly invoices as JSON, CSV and PDF."},
    {
        "name": "Budget",
        "description": "A monthly budget against the month to date: alerts by email and "
        "signed webhook, and what happens at 100 % (notify, or degrade: new connections "
        "refused).",
    },
    {
        "name": "Device identity",
        "description": "Devices proving who they are without a secret: X.509 certificates "
        "(a registered CA, or one device's certificate) and JWTs signed by registered keys.",
    },
    {"name": "Audit", "description": "Who changed what in the tenant, when and from where."},
    {
        "name": "Device shadows",
        "description": "AWS IoT's device shadows on a device of the tenant: desired and reported "
        "state, versions, history. Devices use `$aws/things/{name}/shadow/...` on MQTT.",
    },
]
SHADOW_NOTE = (
    " Devices are sent the same messages on MQTT as for their own request; `ETag` is the "
    "version and `If-Match` makes the change conditional on it (412 when the shadow moved on)."
)

SECRET_NOTE = "The secret is in this response only: it cannot be read again."
TENANT_404 = "Another tenant's object is a 404, as if it did not exist."

# (method, path) -> (tag, summary, description)
OPERATIONS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("post", "/api/v1/signup"): (
        "Accounts",
        "Sign up: a new tenant and its owner",
        "Creates the tenant `tenant` owned by a new account (`email`, `password`) and returns "
        "the tenant with the account's login token for it (the one `POST /auth/token` hands "
        "out again). The slug becomes the first part of every device "
        "username. A link to confirm the address is mailed to it (`user.email_verified` is false "
        "until it is followed, logged in as this account): the token works on the new tenant at "
        "once, but an unconfirmed account is given nothing else (no other tenant, no operator "
        "rights). Throttled per address.",
    ),
    ("post", "/api/v1/auth/token"): (
        "Accounts",
        "Get an API token",
        "Exchanges an email and password for the account's login token for its tenant (send it "
        "as `Authorization: Bearer TOKEN`): the same token at every login, so logging in again "
        "never piles up tokens; `rotate: true` replaces it with a new one and the old one is "
        "refused at once. Named tokens (`POST /tokens`) are separate. A wrong email or password "
        "is a 401. Throttled per address, per (account, address), and per "
        "account from addresses it has not logged in from lately. A new password ends every "
        "token of the account.",
    ),
    ("get", "/api/v1/tenant"): (
        "Tenant",
        "Show the caller's tenant",
        "The tenant the token belongs to: slug, status, plan and settings.",
    ),
    ("patch", "/api/v1/tenant"): (
        "Tenant",
        "Change the tenant's settings",
        "Changes settings such as the ACL default, archiving and offline QoS 0 queueing; the "
        "broker applies them to live connections. Owners and admins only.",
    ),
    ("get", "/api/v1/tokens"): (
        "Tenant",
        "List your API tokens",
        "The caller's API tokens for this tenant (name, prefix, last use); never the tokens.",
    ),
    ("post", "/api/v1/tokens"): (
        "Tenant",
        "Create an API token",
        "A new bearer token for the caller in this tenant. " + SECRET_NOTE,
    ),
    ("delete", "/api/v1/tokens/{token_id}"): (
        "Tenant",
        "Delete an API token",
        "The token stops working at once. " + TENANT_404,
    ),
    ("get", "/api/v1/devices"): (
        "Devices",
        "List devices",
        "The tenant's devices, paginated, filtered by `name` (substring), each with `connected` "
        "(a live MQTT connection now) and its last disconnect reason.",
    ),
    ("post", "/api/v1/devices"): (
        "Devices",
        "Create a device",
        "Creates a device and its first secret; it connects as `tenant/name` with that secret "
        "as password. " + SECRET_NOTE,
    ),
    ("get", "/api/v1/devices/{name}"): (
        "Devices",
        "Show a device",
        "The device with `connected` and its last disconnect reason. " + TENANT_404,
    ),
    ("patch", "/api/v1/devices/{name}"): (
        "Devices",
        "Change a device",
        "Enable or disable it, change its client-id policy or attributes. Disabling drops its "
        "live connections. " + TENANT_404,
    ),
    ("delete", "/api/v1/devices/{name}"): (
        "Devices",
        "Delete a device",
        "Deletes the device and its secrets; its live connections are dropped. " + TENANT_404,
    ),
    ("get", "/api/v1/devices/{name}/credentials"): (
        "Credentials",
        "List a device's secrets",
        "Each secret's `state` (active, retiring, expired, revoked) and `expires_at`; never the "
        "secret itself.",
    ),
    ("post", "/api/v1/devices/{name}/credentials"): (
        "Credentials",
        "Rotate the device's secret",
        "Issues a new secret. The previous one keeps working for `grace_seconds` (default 86400, "
        "24 h; 0 retires it now and drops the connections that use it), then the broker refuses "
        "it and drops the connections still on it. A device holds at most two secrets. "
        + SECRET_NOTE,
    ),
    ("delete", "/api/v1/devices/{name}/credentials/{credential_id}"): (
        "Credentials",
        "Retire a secret now",
        "Revokes one secret at once (e.g. to end a grace period early); connections that "
        "authenticated with it are dropped, those on the other secret stay. " + TENANT_404,
    ),
    ("get", "/api/v1/acls"): (
        "ACLs",
        "List ACL rules",
        "The tenant's rules in the order the broker applies them; the first that matches "
        "decides, the tenant's ACL default when none does.",
    ),
    ("post", "/api/v1/acls"): (
        "ACLs",
        "Add an ACL rule",
        "Allow or deny publish, subscribe or both on a topic filter, for one device or all; "
        "`${tenant}` and `${client}` expand. Live connections get the new rules at once.",
    ),
    ("post", "/api/v1/acls/test"): (
        "ACLs",
        "Test the ACL: may a device publish or subscribe to a topic?",
        "Answers with the broker's own evaluation over the tenant's rules and default, and names "
        "the rule that decided. " + TENANT_404,
    ),
    ("get", "/api/v1/acls/{rule_id}"): (
        "ACLs",
        "Show an ACL rule",
        "One rule: device, action, permission, topic filter and position. " + TENANT_404,
    ),
    ("patch", "/api/v1/acls/{rule_id}"): (
        "ACLs",
        "Change an ACL rule",
        "Changes its action, permission, topic or position; live connections follow. " + TENANT_404,
    ),
    ("delete", "/api/v1/acls/{rule_id}"): (
        "ACLs",
        "Delete an ACL rule",
        "Live connections follow at once. " + TENANT_404,
    ),
    ("get", "/api/v1/rules"): (
        "Rules",
        "List rules",
        "The tenant's SQL rules with their actions and live metrics.",
    ),
    ("post", "/api/v1/rules"): (
        "Rules",
        "Create a rule",
        'A rule in the EMQX-style SQL dialect (`SELECT … FROM "topic/#" WHERE …`) with its '
        "actions (republish, webhook, dataset, and the sinks: s3, sqs, kinesis, postgres, "
        "mqtt_bridge, http_batch); the live rules job picks it up.",
    ),
    ("get", "/api/v1/rules/{name}"): (
        "Rules",
        "Show a rule",
        "One rule: its SQL, actions, whether it is enabled and its metrics. " + TENANT_404,
    ),
    ("patch", "/api/v1/rules/{name}"): (
        "Rules",
        "Change a rule",
        "Changes its SQL, actions or `enabled`; checked like a new rule. " + TENANT_404,
    ),
    ("delete", "/api/v1/rules/{name}"): (
        "Rules",
        "Delete a rule",
        "The live rules job stops running it; its dead letters go too. " + TENANT_404,
    ),
    ("get", "/api/v1/rules/{name}/dead-letters"): (
        "Rules",
        "List a rule's dead letters",
        "Action outputs that failed after every retry, newest first.",
    ),
    ("delete", "/api/v1/rules/{name}/dead-letters"): (
        "Rules",
        "Clear a rule's dead letters",
        "Forgets the failed outputs kept for the rule.",
    ),
    ("post", "/api/v1/rules/test"): (
        "Rules",
        "Dry-run rule SQL on a sample message",
        None,  # keeps the view's own, longer description
    ),
    ("get", "/api/v1/quota"): (
        "Quota and usage",
        "Show the tenant's limits",
        "The limits the broker enforces (the plan's, with the tenant's overrides), with units: "
        "connections, msg/s, bytes/s, bytes, seconds.",
    ),
    ("get", "/api/v1/usage"): (
        "Quota and usage",
        "Usage over time",
        "Messages, bytes, connection time and storage per hour or day between `from` and `to`; "
        "`by=device` adds each device's units and connection minutes per UTC day.",
    ),
    ("get", "/api/v1/usage/explain"): (
        "Quota and usage",
        "What a message costs",
        "The billed 5 KB units of one PUBLISH of the given size, topic, QoS, retain flag, "
        "properties and subscribers, each charge with why, by the broker's own metering rules.",
    ),
    ("get", "/api/v1/usage/forecast"): (
        "Quota and usage",
        "Month to date and forecast",
        "This month per billed dimension, in units and money (plan's included amounts, price "
        "book), and a forecast to the month's end from the last 7 days' daily average.",
    ),
    ("get", "/api/v1/invoices"): (
        "Invoices",
        "List invoices",
        "The tenant's invoices, newest period first, with their status and totals.",
    ),
    ("get", "/api/v1/invoices/{period}"): (
        "Invoices",
        "Show an invoice",
        "The invoice of a month (`YYYY-MM`) as JSON with its lines; add `.csv` or `.pdf` to the "
        "path for a file. " + TENANT_404,
    ),
    ("get", "/api/v1/billing-details"): (
        "Invoices",
        "Show the billing details",
        "Who the tenant's invoices are addressed to: company name, address, country, tax ID, "
        "billing email, purchase order.",
    ),
    ("put", "/api/v1/billing-details"): (
        "Invoices",
        "Change the billing details",
        'Sets the fields given (text; "" clears one). Each invoice copies them when it is '
        "issued; invoices already issued keep what they said.",
    ),
    ("get", "/api/v1/budget"): (
        "Budget",
        "Show the budget and the month to date",
        "The monthly budget (`monthly_cents` null when none is set), the month to date priced "
        "as the invoice will price it (`spend_cents`), the share used, whether new connections "
        "are refused now (`degraded`) and this month's alerts.",
    ),
    ("put", "/api/v1/budget"): (
        "Budget",
        "Set the budget",
        "`monthly_cents` (required), `thresholds` (percent, default [50, 80, 100]), "
        '`at_limit` notify or degrade (at 100 % new CONNECTs are refused with 0x97 "monthly '
        'budget reached"; connected devices keep working), `webhook_url` (alerts signed with '
        "X-Signature-256; the secret is issued in this response only, `rotate_webhook_secret` "
        "issues a new one). A change that lifts the limit lifts it at once.",
    ),
    ("delete", "/api/v1/budget"): (
        "Budget",
        "Remove the budget",
        "No more budget alerts; new connections are accepted again at once. Alerts already "
        "sent stay listed.",
    ),
    ("get", "/api/v1/budget/alerts"): (
        "Budget",
        "List the alerts sent",
        "Every budget threshold crossed and quota nearing (80 % of max_connections or of the "
        "month's included messages), newest first, with when its email and webhook went.",
    ),
    ("get", "/api/v1/cas/registration-code"): (
        "Device identity",
        "Get the CA registration code",
        "The tenant's registration code: the CN of the verification certificate that proves, "
        "when a CA is registered, that the tenant holds the CA's private key.",
    ),
    ("get", "/api/v1/cas"): (
        "Device identity",
        "List registered CA certificates",
        "The CA certificates the tenant registered (name, subject, fingerprint, validity, "
        "revoked or not); devices with certificates they issued connect over TLS.",
    ),
    ("post", "/api/v1/cas"): (
        "Device identity",
        "Register a CA certificate",
        "Registers a CA (`pem`) with proof of its key (`verification_pem`: a certificate it "
        "signed whose CN is the registration code). A CA belongs to one tenant only. At most "
        "the plan's `max_ca_certificates` live CAs (else a 403, code `quota_exceeded`, naming "
        "the quota) and `CA_REGISTRATION_RATE` attempts per tenant (10 a minute by default; "
        "else a 429 with Retry-After).",
    ),
    ("get", "/api/v1/cas/{name}"): (
        "Device identity",
        "Show one registered CA",
        "One CA certificate of the tenant with its subject, fingerprint and validity. "
        + TENANT_404,
    ),
    ("delete", "/api/v1/cas/{name}"): (
        "Device identity",
        "Revoke a CA certificate",
        "Revokes the CA: devices with certificates it issued are refused from now on, and "
        "the connections it admitted are ended within a second.",
    ),
    ("get", "/api/v1/devices/{name}/certificates"): (
        "Device identity",
        "List a device's own certificates",
        "Certificates registered for this device by SHA-256 fingerprint (used together with "
        "the user name `tenant/device`). " + TENANT_404,
    ),
    ("post", "/api/v1/devices/{name}/certificates"): (
        "Device identity",
        "Register a device certificate",
        "Registers one certificate (`pem`) for this device; over TLS, the device presenting it "
        "with its user name connects without a secret.",
    ),
    ("delete", "/api/v1/devices/{name}/certificates/{certificate_id}"): (
        "Device identity",
        "Revoke a device certificate",
        "Revokes one of the device's certificates; connections it admitted end within a second.",
    ),
    ("get", "/api/v1/certificates"): (
        "Device identity",
        "List the tenant's device certificates",
        "Every certificate registered for one of the tenant's devices, newest first: device, "
        "fingerprint (SHA-256, AWS's certificateId), subject, issuer, expiry and `status` "
        "(active, revoked, or expired), filtered by `status` or `device`. Revoke one with "
        "`DELETE /api/v1/devices/{device}/certificates/{id}`.",
    ),
    ("post", "/api/v1/certificates/import"): (
        "Device identity",
        "Import many device certificates",
        "Registers up to 100 certificates at once (AWS's register-certificate, in bulk): each "
        "a PEM (its subject CN names the device) or `{pem, device}`. Each is registered alone: "
        "the answer is 200 with a result per certificate, in order (`registered`, `exists`, or "
        "`error` with why), one refused certificate never holding back the others. `ca`: a "
        "registered CA that must have signed each one; `create_devices`: make missing devices "
        "(otherwise their certificates are refused). More than 100 is a 400.",
    ),
    ("get", "/api/v1/jwt-keys"): (
        "Device identity",
        "List JWT signing keys",
        "Public keys (RS256, ES256) whose JWTs devices may send as their password, by key id.",
    ),
    ("post", "/api/v1/jwt-keys"): (
        "Device identity",
        "Register JWT signing keys",
        "Registers a public key as PEM, or every key of a JWKS document. A device's JWT must "
        "name it in `sub`, carry `exp` (at most 24 hours ahead) and be signed by one of them.",
    ),
    ("get", "/api/v1/jwt-keys/{kid}"): (
        "Device identity",
        "Show one JWT signing key",
        "One registered public key with its algorithm and state. " + TENANT_404,
    ),
    ("delete", "/api/v1/jwt-keys/{kid}"): (
        "Device identity",
        "Revoke a JWT signing key",
        "Revokes the key: JWTs it signed are refused, and the connections they admitted end "
        "within a second.",
    ),
    ("get", "/api/v1/audit"): (
        "Audit",
        "Read the audit log",
        "Every change to the tenant's objects, newest first: when, who, through which door "
        "(api, portal, admin, command), from which address, what. Owners only.",
    ),
    ("get", "/api/v1/audit.csv"): (
        "Audit",
        "Export the audit log as CSV",
        "The same entries as the audit log, as a CSV download (cells that a spreadsheet would "
        "read as formulas are quoted). Owners only.",
    ),
    ("get", "/api/v1/devices/{name}/shadow"): (
        "Device shadows",
        "Get a device's classic shadow",
        "AWS's GetThingShadow: desired, reported and their delta, a timestamp per field, the "
        "version (also the `ETag`). 404 when it does not exist (never made, or deleted).",
    ),
    ("post", "/api/v1/devices/{name}/shadow"): (
        "Device shadows",
        "Update a device's classic shadow",
        "AWS's UpdateThingShadow: the body is AWS's request state document; `state` is merged "
        "(`null` deletes a field), a `version` in it must be the shadow's (409). Answers the "
        "`/update/accepted` document; refusals carry AWS's error document under `error.aws`."
        + SHADOW_NOTE,
    ),
    ("delete", "/api/v1/devices/{name}/shadow"): (
        "Device shadows",
        "Delete a device's classic shadow",
        "AWS's DeleteThingShadow: answers the version it had, which a shadow made again goes on "
        "from; devices are sent `/delete/accepted`. 404 when there is none.",
    ),
    ("get", "/api/v1/devices/{name}/shadow/history"): (
        "Device shadows",
        "A classic shadow's history",
        "Its past versions, newest first (the state after each change, the request, who made "
        "it and through which door), kept for the plan's `shadow_history_days`.",
    ),
    ("get", "/api/v1/devices/{name}/shadows"): (
        "Device shadows",
        "List a device's named shadows",
        "AWS's ListNamedShadowsForThing: the names of the device's named shadows that exist, "
        "with their versions.",
    ),
    ("get", "/api/v1/devices/{name}/shadows/{shadow}"): (
        "Device shadows",
        "Get a named shadow",
        "One named shadow of the device (AWS's GetThingShadow with `name`), as the classic one "
        "is answered: state with delta, metadata, version.",
    ),
    ("post", "/api/v1/devices/{name}/shadows/{shadow}"): (
        "Device shadows",
        "Update a named shadow",
        "Merges a request state document into the named shadow `shadow` (made on its first "
        "update; names of 1-64 letters, digits, `:`, `_`, `-`)." + SHADOW_NOTE,
    ),
    ("delete", "/api/v1/devices/{name}/shadows/{shadow}"): (
        "Device shadows",
        "Delete a named shadow",
        "Deletes the named shadow; its version is kept for a shadow made again under the name, "
        "and devices are sent its `/delete/accepted`.",
    ),
    ("get", "/api/v1/devices/{name}/shadows/{shadow}/history"): (
        "Device shadows",
        "A named shadow's history",
        "The named shadow's kept versions, newest first, as for the classic shadow's history.",
    ),
    ("post", "/api/v1/rules/{name}/dead-letters/replay"): (
        "Rules",
        "Replay a rule's dead letters",
        "Sends the rule's dead-lettered webhook calls again (up to 100, oldest first) through "
        "the same signed call as the live job, with the rule's current secret. A letter whose "
        "action a run over history did since is dropped, not sent twice.",
    ),
    ("get", "/api/v1/rules/{name}/runs"): (
        "Rules",
        "List a rule's runs over history",
        "Newest first, with their state and figures.",
    ),
    ("post", "/api/v1/rules/{name}/runs"): ("Rules", "Preview or run a rule over history", None),
    ("get", "/api/v1/rules/{name}/runs/{run_id}"): (
        "Rules",
        "Follow a run over history",
        "Its state (queued, running, done, failed, cancelled), `progress` (0..1) and figures "
        "so far.",
    ),
    ("post", "/api/v1/rules/{name}/runs/{run_id}/cancel"): (
        "Rules",
        "Cancel a run over history",
        None,
    ),
    ("get", "/api/v1/history"): (
        "History",
        "Show what the archive keeps and stores",
        "The plan's default history and limits (`max_history_days`, `max_history_policies`), "
        "the enabled rules whose FROM is archived too, the days history is kept "
        "(`retention_days`), the history stored now and this month's storage in GB-hours.",
    ),
    ("get", "/api/v1/history-policies"): (
        "History",
        "List history policies",
        "The tenant's topic filters kept in the archive, each with its days.",
    ),
    ("post", "/api/v1/history-policies"): (
        "History",
        "Keep a topic filter's messages for some days",
        "From now on the broker archives the messages whose topic `topic_filter` matches (MQTT "
        "wildcards; `$events/…` names lifecycle events) and keeps them `days` days (1 to the "
        "plan's `max_history_days`). While a tenant has no policy its plan's default applies "
        "(free: nothing; paid: every topic for 7 days). A bad filter, too many days or too many "
        "policies is a 400 that says which.",
    ),
    ("get", "/api/v1/history-policies/{policy_id}"): (
        "History",
        "Show a history policy",
        "One policy: its topic filter, days and when it was added. " + TENANT_404,
    ),
    ("delete", "/api/v1/history-policies/{policy_id}"): (
        "History",
        "Delete a history policy",
        "The broker stops archiving its topics (unless another policy or a rule needs them); "
        "what was kept goes with the next hourly retention. " + TENANT_404,
    ),
}


# What the broker holds (issue 30): its own module, merged here.
TAGS.append(INSPECTION_TAG)
OPERATIONS.update(INSPECTION_OPERATIONS)
OPERATIONS.update(SHARED_GROUP_OPERATIONS)  # issue 45: durable shared groups, under Inspection
TAGS.append(JOURNEY_TAG)
OPERATIONS.update(JOURNEY_OPERATIONS)
TAGS.extend(JOB_TAGS)  # issue 32's jobs and device groups
OPERATIONS.update(JOB_OPERATIONS)
TAGS.append(FLEET_TAG)
OPERATIONS.update(FLEET_OPERATIONS)
TAGS.append(ALARMS_TAG)  # issue 46
OPERATIONS.update(ALARM_OPERATIONS)
OPERATIONS.update(SINK_OPERATIONS)  # issue 47: sinks, under Rules


def describe_operations(result, generator, request, public):
    """drf-spectacular post-processing hook: the words above on every operation."""
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            words = OPERATIONS.get((method, path))
            if words is None:
                continue
            tag, summary, description = words
            operation["tags"] = [tag]
            operation["summary"] = summary
            if description is not None:
                operation["description"] = description
    result["tags"] = TAGS
    return result
