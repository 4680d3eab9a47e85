"""The tenant domain's models (the `tenants` app's `models`), one module per sub-domain, named
after the package of tenants/ that reads and writes it where there is one. Every model and
public name is re-exported here: `from tenants.models import Tenant` is how the rest of the
project names them, and importing this package registers them all with Django under the
`tenants` app ("tenants.X" references name the app, never a module; the one module path the
migrations name, `tenants.models.ActionsField`, is re-exported here too). A model that points
at one of another module imports it from that module: they import each other one way only (the
import contracts allow no cycle).

The broker reads these tables directly (psycopg), so table and column names are part of the
contract with `data_plane/tenancy/`: change them with a migration on both sides.

- `names`: what tenant slugs and device names may look like (`SLUG_VALIDATOR`,
  `RESERVED_SLUGS`, `DEVICE_NAME_VALIDATOR`);
- `tenant`: `Plan` (the price point and the limits the broker enforces) and `Tenant`;
- `accounts`: people's access to a tenant: `Membership`, `Invitation`, `ApiToken`,
  `AccountTrust`;
- `devices`: `Device`, its live `DeviceConnection`s and its `Credential`s;
- `identity`: device identity beyond secrets: `CaCertificate`, `DeviceCertificate`, `JwtKey`;
- `acls`: `AclRule`;
- `rules`: `Rule` (its `ActionsField`) and what the rules jobs keep of it: `RuleMetrics`,
  `RuleDeadLetter`, `RuleActionRetry`, `RuleFeedPosition`, `RuleActionLedger`, `RuleRun`;
- `sinks`: a sink's outbox and health: `SinkOutbox`, `SinkState` (issue 47);
- `alarms`: `AlarmDefinition`, `AlarmState`, `AlarmTransition`, `AlarmNotification` (issue 46);
- `usage`: `Usage` (per minute), `DeviceUsage` (per device and day), `UsageLogImport`;
- `billing`: `PriceBook`, `Invoice`, `InvoiceCounter`, `BillingDetails`, `Credit`,
  `TenantPlanChange`;
- `budgets`: `Budget`, `BudgetAlert`;
- `history`: `HistoryPolicy`;
- `shadows`: `Shadow`, `ShadowVersion`;
- `jobs`: `DeviceGroup` (what jobs target), `Job`, `JobExecution`, `JobAnnouncement`,
  `JobArtifact`, `JobMeter`;
- `fleet`: fleet provisioning by claim: `FleetAuthority`, `ProvisioningTemplate`,
  `FleetCertificate`;
- `broker_state`: what the broker keeps, schema owned here: `MqttSession`, `MqttQueuedMessage`,
  `RetainedMessage`, `DelayedMessage`, `MqttStreamMark`;
- `shared_groups`: `SharedGroupQueue` (a durable shared subscription group, issue 45);
- `audit`: `AuditEntry`.
"""

# The quota keys (`Plan.limits()`), named here as before the split.
from common.contracts.quota_keys import QUOTA_KEYS
from tenants.models.accounts import AccountTrust, ApiToken, Invitation, Membership
from tenants.models.acls import AclRule
from tenants.models.alarms import AlarmDefinition, AlarmNotification, AlarmState, AlarmTransition
from tenants.models.audit import AuditEntry
from tenants.models.billing import (
    BillingDetails,
    Credit,
    Invoice,
    InvoiceCounter,
    PriceBook,
    TenantPlanChange,
)
from tenants.models.broker_state import (
    DelayedMessage,
    MqttQueuedMessage,
    MqttSession,
    MqttStreamMark,
    RetainedMessage,
)
from tenants.models.budgets import Budget, BudgetAlert
from tenants.models.devices import Credential, Device, DeviceConnection
from tenants.models.fleet import FleetAuthority, FleetCertificate, ProvisioningTemplate
from tenants.models.history import HistoryPolicy
from tenants.models.identity import CaCertificate, DeviceCertificate, JwtKey
from tenants.models.jobs import (
    DeviceGroup,
    Job,
    JobAnnouncement,
    JobArtifact,
    JobExecution,
    JobMeter,
)
from tenants.models.names import DEVICE_NAME_VALIDATOR, RESERVED_SLUGS, SLUG_VALIDATOR
from tenants.models.rules import (
    ActionsField,
    Rule,
    RuleActionLedger,
    RuleActionRetry,
    RuleDeadLetter,
    RuleFeedPosition,
    RuleMetrics,
    RuleRun,
)
from tenants.models.shadows import Shadow, ShadowVersion
from tenants.models.shared_groups import SharedGroupQueue
from tenants.models.sinks import SinkOutbox, SinkState
from tenants.models.tenant import Plan, Tenant
from tenants.models.usage import DeviceUsage, Usage, UsageLogImport

__all__ = [
    "AccountTrust",
    "AclRule",
    "ActionsField",
    "AlarmDefinition",
    "AlarmNotification",
    "AlarmState",
    "AlarmTransition",
    "ApiToken",
    "AuditEntry",
    "BillingDetails",
    "Budget",
    "BudgetAlert",
    "CaCertificate",
    "Credential",
    "Credit",
    "DEVICE_NAME_VALIDATOR",
    "DelayedMessage",
    "Device",
    "DeviceCertificate",
    "DeviceConnection",
    "DeviceGroup",
    "DeviceUsage",
    "FleetAuthority",
    "FleetCertificate",
    "HistoryPolicy",
    "Invitation",
    "Invoice",
    "InvoiceCounter",
    "Job",
    "JobAnnouncement",
    "JobArtifact",
    "JobExecution",
    "JobMeter",
    "JwtKey",
    "Membership",
    "MqttQueuedMessage",
    "MqttSession",
    "MqttStreamMark",
    "Plan",
    "PriceBook",
    "ProvisioningTemplate",
    "QUOTA_KEYS",
    "RESERVED_SLUGS",
    "RetainedMessage",
    "Rule",
    "RuleActionLedger",
    "RuleActionRetry",
    "RuleDeadLetter",
    "RuleFeedPosition",
    "RuleMetrics",
    "RuleRun",
    "SLUG_VALIDATOR",
    "Shadow",
    "ShadowVersion",
    "SharedGroupQueue",
    "SinkOutbox",
    "SinkState",
    "Tenant",
    "TenantPlanChange",
    "Usage",
    "UsageLogImport",
]
