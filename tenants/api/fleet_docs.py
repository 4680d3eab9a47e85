"""The OpenAPI words of fleet provisioning (tenants/api/fleet_views.py) and of a CA's
just-in-time registration, merged into `tenants.api.docs`."""

from __future__ import annotations

FLEET_TAG = {
    "name": "Fleet provisioning",
    "description": "AWS IoT's provisioning by claim: templates that say what a new device "
    "becomes, and claim certificates a fleet shares to get its own certificates over MQTT.",
}

_T = "/api/v1/provisioning-templates"
_404 = " Another tenant's template or claim is a 404, as if it did not exist."

FLEET_OPERATIONS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("get", _T): (
        "Fleet provisioning",
        "List provisioning templates",
        "The tenant's provisioning templates: the device name from parameters, the ACL rules, "
        "attributes and device groups each new device gets, enabled or not, the "
        "pre-provisioning hook.",
    ),
    ("post", _T): (
        "Fleet provisioning",
        "Create a provisioning template",
        "`device_name_template` names at least one parameter (`sensor-{SerialNumber}`) and, "
        "filled in, is a device name; `acl_rules` are given to each device it makes "
        "(`${client}` is its name); `groups` names device groups of the tenant each joins (an "
        "unknown one is a 400 naming it); `pre_provisioning_hook_url` is asked first (a 2xx "
        "allows).",
    ),
    ("patch", _T + "/{name}"): (
        "Fleet provisioning",
        "Change a provisioning template",
        "Any field but `name`, checked as on creation: devices provisioned from now on get the "
        "new values, those it made keep theirs." + _404,
    ),
    ("get", _T + "/{name}"): (
        "Fleet provisioning",
        "Show one provisioning template",
        "One template of the tenant with the parameters its device name takes." + _404,
    ),
    ("delete", _T + "/{name}"): (
        "Fleet provisioning",
        "Delete a provisioning template",
        "Deletes the template and its claim certificates: no device provisions with them from "
        "now on; devices it made stay.",
    ),
    ("get", _T + "/{name}/claims"): (
        "Fleet provisioning",
        "List a template's claim certificates",
        "The claim certificates issued for this template (certificate id, PEM, validity, "
        "revoked or not), without their keys." + _404,
    ),
    ("post", _T + "/{name}/claims"): (
        "Fleet provisioning",
        "Issue a claim certificate",
        "A certificate and key, signed by the tenant's fleet CA, that may only call the fleet "
        "provisioning topics of this template. The private key is in this response only.",
    ),
    ("delete", _T + "/{name}/claims/{certificate_id}"): (
        "Fleet provisioning",
        "Revoke a claim certificate",
        "Revokes the claim: it connects no more, and live connections with it provision no "
        "more; devices it provisioned keep their own certificates.",
    ),
    ("patch", "/api/v1/cas/{name}"): (
        "Device identity",
        "Turn just-in-time registration on or off",
        "`auto_registration`: a certificate this CA signed whose CN names no device yet makes "
        "that device (no ACL rules of its own) on its first connection.",
    ),
}
