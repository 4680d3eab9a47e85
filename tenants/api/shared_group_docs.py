"""The OpenAPI words of the shared group endpoints (tenants/api/shared_group_views.py), merged
into `tenants.api.docs`; under the Inspection tag, with what else the broker holds."""

from __future__ import annotations

SHARED_GROUP_OPERATIONS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("get", "/api/v1/shared-groups"): (
        "Inspection",
        "List the tenant's durable shared groups",
        "Every shared subscription group (`$share/{group}/{filter}`) the broker keeps for the "
        "tenant, by group and filter, paged, each with `depth` (messages it holds while no "
        "member takes them), `oldest_at` (when the oldest of them came; null when none), "
        "`members` (as its broker last counted them) and `expires_at` (a group without members "
        "goes with its messages then, after the plan's `group_retention`). Not metered. "
        "(`/api/v1/groups` is the devices' groups.)",
    ),
    ("delete", "/api/v1/shared-groups/{group}"): (
        "Inspection",
        "Delete a shared group and its messages",
        "Deletes the group `group` on the topic filter `filter` (required; a missing or "
        "malformed filter is a 400 naming the problem) with every message it holds, and answers "
        "204; the broker drops what it holds of it at once. Members still subscribed make it "
        "again, empty. No such group, another tenant's included, is a 404. Recorded in the "
        "audit log. Owners and admins only.",
    ),
}
