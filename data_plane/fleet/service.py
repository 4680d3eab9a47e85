"""The fleet provisioning service (AWS IoT's MQTT API for provisioning by claim), a broker port
beside the shadows and jobs (`data_plane.jobs.reserved.ReservedServices` routes `$aws/…`
requests to it).

A connection authenticated with a claim certificate (`tenancy.fleet_identity.ClaimAuthorizer`)
may publish:

- `$aws/certificates/create/json`: a new P-256 key and a certificate the tenant's fleet CA
  signs, with a one-time ownership token (valid `TOKEN_SECONDS`);
- `$aws/certificates/create-from-csr/json` (`certificateSigningRequest`): the same for the
  device's own key;
- `$aws/provisioning-templates/{template}/provision/json` (`certificateOwnershipToken`,
  `parameters`): the token's certificate becomes the certificate of a new device of the tenant,
  named by the template from the parameters, with the template's ACL rules; the template's
  pre-provisioning hook, when it has one, is asked first (a 2xx answer allows).

Replies go to the requesting connection alone, never to others subscribed to the same topic: a
whole fleet shares one claim, and a reply carries a private key. Refusals are AWS's body
`{statusCode, errorCode, errorMessage}` on `…/rejected`. The claim is read again at each request
(uncached), so revoking it stops provisioning at once."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import secrets
import string
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509

from common import json_input
from common.fleet import pki as fleet_pki
from common.fleet import topics
from common.security.device_credentials import IdentityError
from common.security.sealed import unseal
from common.security.service_token import PROVISIONING_PUBLISHER
from common.webhooks.delivery import Timeouts, post_once
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from data_plane.broker.session import Delivery
from data_plane.fleet.store import DeviceExists, FleetStore
from data_plane.tenancy.fleet_identity import ClaimAuthorizer

log = logging.getLogger(__name__)

# The replies' client id: the tenant's traffic, like the claim's own requests (AWS bills fleet
# provisioning's MQTT messages as messaging): `common.security.service_token`.
PUBLISHER = PROVISIONING_PUBLISHER
TOKEN_SECONDS = 3600  # AWS: the certificate ownership token is valid for one hour
MAX_IN_FLIGHT = 4  # requests of one connection not yet answered
DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")  # tenants.models' validator
MAX_PAYLOAD = 16_384
MAX_DEPTH = 8  # a request holds `parameters`, an object of strings


class Rejected(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class FleetService:
    def __init__(self, store: FleetStore) -> None:
        self.store = store
        self.broker: Any = None
        self.in_flight: dict[tuple[str, str], int] = defaultdict(int)
        self.tasks: set[asyncio.Task] = set()
        self.hook_timeouts = Timeouts(connect=3.0, first_byte=5.0, total=8.0)

    def attach(self, broker: Broker) -> None:
        self.broker = broker

    @staticmethod
    def owns(topic: str) -> bool:
        return topics.parse(topic) is not None

    @staticmethod
    def admits(auth: Any, topic: str) -> bool:
        acl = auth.acl
        return isinstance(acl, ClaimAuthorizer) and acl.can_publish(topic)

    def request(self, auth: Any, message: Message) -> None:
        parsed = topics.parse(message.topic)
        if parsed is None:
            return
        # A request, not routed: metered here as the tenant's message (its reply when sent).
        self.broker.accounts.received(message)
        key = (auth.tenant, message.publisher)
        if self.in_flight[key] >= MAX_IN_FLIGHT:
            self._reply(auth, message, parsed, Rejected(429, "Throttled", "Rate limit exceeded"))
            return
        self.in_flight[key] += 1
        task = asyncio.get_running_loop().create_task(self._serve(auth, message, parsed, key))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _serve(self, auth: Any, message: Message, parsed: topics.FleetTopic, key) -> None:
        try:
            body = self._body(message.payload)
            if parsed.operation == topics.PROVISION:
                outcome: Any = await self._provision(auth, message, body)
            else:
                outcome = await self._create(auth, parsed.operation, body)
        except Rejected as refusal:
            outcome = refusal
        except Exception:
            log.exception("fleet provisioning request failed: %s", message.topic)
            outcome = Rejected(500, "InternalFailure", "Internal service failure")
        finally:
            count = self.in_flight.get(key, 0)
            if count <= 1:
                self.in_flight.pop(key, None)
            else:
                self.in_flight[key] = count - 1
        self._reply(auth, message, parsed, outcome)

    @staticmethod
    def _body(payload: bytes) -> dict:
        if len(payload) > MAX_PAYLOAD:
            raise Rejected(413, "PayloadTooLarge", "The payload exceeds the maximum size")
        if not payload:
            return {}
        try:  # NaN, NUL, lone surrogates, deep nesting: a 400, not a traceback
            body = json_input.loads(payload, max_depth=MAX_DEPTH)
        except json_input.Refused as refused:
            reason = "" if refused.reason == json_input.NOT_JSON else f": {refused.reason}"
            raise Rejected(400, "InvalidPayload", f"Invalid JSON{reason}") from None
        if not isinstance(body, dict):
            raise Rejected(400, "InvalidPayload", "The payload must be a JSON object")
        return body

    async def _claim(self, auth: Any):
        template = await self.store.live_claim(auth.acl.certificate_id)
        if template is None:
            raise Rejected(
                403, "Forbidden", "The claim certificate is revoked or its template disabled"
            )
        return template

    async def _create(self, auth: Any, operation: str, body: dict) -> dict:
        template = await self._claim(auth)
        authority = await self.store.authority(auth.tenant)
        if authority is None:
            raise Rejected(403, "Forbidden", "The tenant's fleet CA is gone")
        ca_cert = x509.load_pem_x509_certificate(authority.ca_pem.encode())
        ca_key = fleet_pki.load_key(unseal(authority.sealed_key))
        answer: dict[str, str] = {}
        if operation == topics.CREATE_FROM_CSR:
            csr = body.get("certificateSigningRequest")
            try:
                cert = fleet_pki.issue_for_csr(ca_cert, ca_key, csr if isinstance(csr, str) else "")
            except IdentityError as exc:
                raise Rejected(400, "InvalidPayload", str(exc)) from None
        else:
            cert, key = fleet_pki.issue_with_key(ca_cert, ca_key)
            answer["privateKey"] = fleet_pki.key_pem(key)
        token = secrets.token_urlsafe(32)
        certificate_id = fleet_pki.certificate_id(cert)
        pem = fleet_pki.certificate_pem(cert)
        most = auth.quota.get("max_certificates")
        kept = await self.store.add_certificate(
            authority.tenant_id,
            certificate_id,
            template.id,
            pem,
            _token_hash(token),
            datetime.now(UTC) + timedelta(seconds=TOKEN_SECONDS),
            cert.not_valid_after_utc,
            most,
        )
        if not kept:  # counted like the broker's other limits
            self.broker.quota_exceeded(auth.tenant, "certificates")
            raise Rejected(
                403,
                "LimitExceeded",
                f"The tenant already has {most} live certificates (max_certificates)",
            )
        return {
            "certificateId": certificate_id,
            "certificatePem": pem,
            **answer,
            "certificateOwnershipToken": token,
        }

    async def _provision(self, auth: Any, message: Message, body: dict) -> dict:
        template = await self._claim(auth)
        token = body.get("certificateOwnershipToken")
        if not isinstance(token, str) or not token:
            raise Rejected(400, "InvalidPayload", "Missing certificateOwnershipToken")
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise Rejected(400, "InvalidPayload", "parameters must be an object")
        name = _device_name(template.device_name_template, parameters)
        if template.hook_url:
            verdict = await post_once(
                template.hook_url,
                "",
                {
                    "claimCertificateId": auth.acl.certificate_id,
                    "templateName": auth.acl.template,
                    "clientId": message.publisher,
                    "parameters": parameters,
                    "thingName": name,
                },
                rule_id=None,
                timeouts=self.hook_timeouts,
            )
            if not verdict.ok:
                raise Rejected(403, "AccessDenied", "The pre-provisioning hook refused")
        authority = await self.store.authority(auth.tenant)
        if authority is None:
            raise Rejected(403, "Forbidden", "The tenant's fleet CA is gone")
        try:
            bound = await self.store.register_thing(
                auth.tenant, authority.tenant_id, template, _token_hash(token), name
            )
        except DeviceExists:
            raise Rejected(409, "ResourceConflict", f"A device named {name} exists") from None
        if not bound:
            raise Rejected(400, "InvalidCertificateOwnershipToken", "Invalid token")
        return {"deviceConfiguration": {}, "thingName": name}

    # -- replies: to the requesting connection only --------------------------------------

    def _reply(self, auth: Any, message: Message, parsed, outcome: Any) -> None:
        if isinstance(outcome, Rejected):
            reply, body = (
                "rejected",
                {
                    "statusCode": outcome.status,
                    "errorCode": outcome.code,
                    "errorMessage": outcome.message,
                },
            )
        else:
            reply, body = "accepted", outcome
        topic = parsed.reply_topic(reply)
        payload = json.dumps(body, separators=(",", ":")).encode()
        reply_message = Message(topic, payload, 1, False, {}, None, PUBLISHER, auth.tenant)
        broker = self.broker
        subscribers, _groups = broker.router.match(auth.tenant, topic)
        mine = [sub for sub in subscribers if sub.session.client_id == message.publisher]
        if not mine:
            return
        qos = min(1, max(sub.qos for sub in mine))
        ids = tuple(sub.subscription_id for sub in mine if sub.subscription_id)
        mine[0].session.deliver(Delivery(reply_message, qos, False, ids))


def _device_name(template: str, parameters: dict) -> str:
    fields = [f for _t, f, _s, _c in string.Formatter().parse(template) if f is not None]
    missing = [f for f in fields if not isinstance(parameters.get(f), str) or not parameters[f]]
    if missing:
        raise Rejected(400, "InvalidParameters", f"Missing parameters: {', '.join(missing)}")
    try:  # the control plane allows plain `{Name}` fields only; never raise on a stored one
        name = template.format(**{f: parameters[f] for f in fields})
    except (KeyError, IndexError, ValueError):
        raise Rejected(400, "InvalidParameters", "The template cannot name a device") from None
    if not DEVICE_NAME.match(name):
        raise Rejected(400, "InvalidParameters", f"{name!r} is not a valid thing name")
    return name
