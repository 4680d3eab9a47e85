"""AWS IoT's fleet provisioning topics (MQTT API), parsed:

- `$aws/certificates/create/json`: CreateKeysAndCertificate;
- `$aws/certificates/create-from-csr/json`: CreateCertificateFromCsr;
- `$aws/provisioning-templates/{template}/provision/json`: RegisterThing;

each answered on `…/accepted` or `…/rejected`. Only the JSON payload format is served (AWS's
`cbor` variants are refused as any other topic)."""

from __future__ import annotations

from dataclasses import dataclass

CREATE = "create"
CREATE_FROM_CSR = "create-from-csr"
PROVISION = "provision"
REPLIES = ("accepted", "rejected")


@dataclass(frozen=True, slots=True)
class FleetTopic:
    operation: str  # create | create-from-csr | provision
    template: str  # the template's name (provision only)
    reply: str  # "" for a request, else accepted | rejected (or `+` in a filter)

    @property
    def request_topic(self) -> str:
        if self.operation == PROVISION:
            return f"$aws/provisioning-templates/{self.template}/provision/json"
        return f"$aws/certificates/{self.operation}/json"

    def reply_topic(self, reply: str) -> str:
        return f"{self.request_topic}/{reply}"


def parse(topic: str, *, as_filter: bool = False) -> FleetTopic | None:
    """The fleet provisioning topic `topic` is, or None. `as_filter`: a reply level may be `+`
    (the SDK may subscribe `…/json/+`)."""
    levels = topic.split("/")
    if levels[0] != "$aws" or len(levels) < 4:
        return None
    if levels[1] == "certificates" and levels[2] in (CREATE, CREATE_FROM_CSR):
        operation, template, rest = levels[2], "", levels[3:]
    elif levels[1] == "provisioning-templates" and len(levels) >= 5 and levels[3] == PROVISION:
        operation, template, rest = PROVISION, levels[2], levels[4:]
        if not template or template in ("+", "#"):
            return None
    else:
        return None
    if rest[0] != "json" or len(rest) > 2:
        return None
    reply = rest[1] if len(rest) == 2 else ""
    if reply and reply not in REPLIES and not (as_filter and reply == "+"):
        return None
    return FleetTopic(operation, template, reply)
