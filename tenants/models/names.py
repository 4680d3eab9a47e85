"""What names in the tenant domain may look like: tenant slugs (which go into MQTT user names and
topic namespaces), and device names (and the names of what is named like one: rules, groups,
CAs, JWT keys, provisioning templates)."""

from __future__ import annotations

from django.core.validators import RegexValidator

# Slugs go into MQTT usernames and topic namespaces: keep them boring.
SLUG_VALIDATOR = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{1,30})[a-z0-9]$",
    "Use 3-32 lowercase letters, digits and hyphens, starting and ending with a letter or digit.",
)
RESERVED_SLUGS = frozenset(
    {
        "sys",
        "admin",
        "api",
        "www",
        "root",
        "mqtt",
        "broker",
        "static",
        "portal",
        "internal",
        "system",
        "share",
        "events",
        "support",
        "billing",
        "status",
        "docs",
    }
)
# A device name is the `client` half of `tenant/client` and may become a client id.
DEVICE_NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$",
    "Use 1-64 letters, digits, '_', '.', ':' or '-', starting with a letter or digit.",
)
