"""Enhanced authentication (MQTT 5.0 §4.12): the challenge/response carried by AUTH packets.

A method is registered on the broker under its name (`Broker.enhanced_auth`). For each exchange
(the one that completes CONNECT, and each re-authentication the client starts with AUTH 0x19)
the connection asks the method for an `Exchange` and feeds it the client's Authentication Data
until it answers `Succeed` or `Fail`; every `Continue` goes to the client as AUTH 0x18. The
connection does the packets and the protocol rules; a method only judges data.

Built in: SCRAM-SHA-256 (RFC 5802/7677), so a device proves its secret without sending it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from scramp import ScramException, ScramMechanism

from common.mqtt.codec import encode
from common.mqtt.packets import MQTT_5_0, Auth, Connect
from common.mqtt.reason_codes import ReasonCode
from data_plane.broker.auth import AuthResult


@dataclass(slots=True, frozen=True)
class Continue:
    """Send this to the client (AUTH 0x18) and wait for its answer."""

    data: bytes


@dataclass(slots=True, frozen=True)
class Succeed:
    """Authenticated as `result`; `data` (if any) goes to the client in CONNACK or AUTH 0x00."""

    result: AuthResult
    data: bytes | None = None


@dataclass(slots=True, frozen=True)
class Fail:
    reason_code: int = ReasonCode.NOT_AUTHORIZED
    reason: str = ""


Step = Continue | Succeed | Fail


class Exchange(Protocol):
    async def step(self, data: bytes | None) -> Step:
        """The client's Authentication Data (None when it sent none): the next move."""
        ...


class Method(Protocol):
    def start(self, connect: Connect, peer: str) -> Exchange:
        """A new exchange for the connection that sent `connect` (also on re-authentication:
        the identity is still the CONNECT's user name)."""
        ...


# The identity a user name stands for (secret not checked: the method proves it) and its SCRAM
# verifier (salt, stored key, server key, iterations), or a list of `(credential, verifier)`
# pairs, newest first, when the device holds two secrets (a rotation's grace period); a failed
# AuthResult when there is none.
ScramVerifier = tuple[object, ...]  # as scramp makes it: (salt, stored key, server key, iterations)
ScramFound = ScramVerifier | list[tuple[object, ScramVerifier]] | None
ScramLookup = Callable[[Connect, str], Awaitable[tuple[AuthResult, ScramFound]]]


class ScramServer(Protocol):
    """What an exchange asks of a scramp server (scramp has no type information)."""

    def set_client_first(self, message: str) -> None: ...

    def get_server_first(self) -> str: ...

    def set_client_final(self, message: str) -> None: ...

    def get_server_final(self) -> str: ...


class ScramSha256:
    """SCRAM-SHA-256: client-first in CONNECT, server-first in AUTH 0x18, client-final in
    AUTH 0x18, server-final (the server's proof) in CONNACK or AUTH 0x00. The SCRAM user name
    must be the CONNECT's user name (`tenant/device`)."""

    name = "SCRAM-SHA-256"
    mechanism = ScramMechanism("SCRAM-SHA-256")

    def __init__(self, lookup: ScramLookup) -> None:
        self.lookup = lookup

    def start(self, connect: Connect, peer: str) -> Exchange:
        return _ScramExchange(self, connect, peer)

    @classmethod
    def verifier(cls, secret: str, iterations: int = 4096) -> ScramVerifier:
        """What the server keeps instead of the secret."""
        verifier: ScramVerifier = cls.mechanism.make_auth_info(secret, iteration_count=iterations)
        return verifier


class _ScramExchange:
    """One exchange. With several verifiers (two secrets during a rotation's grace period), one
    SCRAM server per verifier that shares the newest one's salt and iteration count, all with the
    same server nonce, so the client sees one server-first message; the client's proof is then
    checked against each, and the secret it proves decides which credential the connection
    holds. A verifier with another salt (issued before rotations shared salts) is not offered."""

    def __init__(self, method: ScramSha256, connect: Connect, peer: str) -> None:
        self.method, self.connect, self.peer = method, connect, peer
        self.result: AuthResult  # the identity looked up: set by `_first`, before any server
        self.servers: list[tuple[object, ScramServer]] = []  # (credential or None, its server)

    async def step(self, data: bytes | None) -> Step:
        try:
            message = (data or b"").decode("utf-8")
        except UnicodeDecodeError:
            return Fail(ReasonCode.NOT_AUTHORIZED, "SCRAM messages are UTF-8")
        if not self.servers:
            return await self._first(message)
        error = None
        for credential, server in self.servers:
            try:
                server.set_client_final(message)
            except ScramException as exc:
                error = exc
                continue
            result = self.result
            if credential is not None:
                result = replace(
                    result,
                    credential_id=getattr(credential, "id", None),
                    credential_expires_at=getattr(credential, "expires_at", None),
                )
            return Succeed(result, server.get_server_final().encode())
        return Fail(
            ReasonCode.NOT_AUTHORIZED,
            f"SCRAM: {getattr(error, 'server_error', None) or 'invalid proof'}",
        )

    async def _first(self, message: str) -> Step:
        result, found = await self.method.lookup(self.connect, self.peer)
        if result.reason_code:
            return Fail(result.reason_code, result.reason)
        if not found:
            return Fail(ReasonCode.BAD_AUTHENTICATION_METHOD, "no SCRAM credential for this device")
        candidates = found if isinstance(found, list) else [(None, found)]
        newest = candidates[0][1]
        usable = [
            (c, v) for c, v in candidates if (v[0], v[3]) == (newest[0], newest[3])
        ]  # same salt and iteration count: one server-first message fits them all
        username = self.connect.username
        nonce = secrets.token_urlsafe(18)
        self.result = result
        for credential, verifier in usable:

            def credentials(user: str, verifier: ScramVerifier = verifier) -> ScramVerifier:
                if user != username:
                    raise ValueError("the SCRAM user must be the CONNECT user name")
                return verifier

            server: ScramServer = self.method.mechanism.make_server(credentials, s_nonce=nonce)
            try:
                server.set_client_first(message)
            except ScramException as exc:
                self.servers = []
                return Fail(ReasonCode.NOT_AUTHORIZED, f"SCRAM: {exc}")
            self.servers.append((credential, server))
        firsts = [server.get_server_first() for _, server in self.servers]  # each server's stage
        return Continue(firsts[0].encode())


class EnhancedAuthState:
    """A connection's enhanced authentication: its method, the CONNECT it answers for (the
    identity on re-authentication), the exchange in progress and the wait for the next AUTH."""

    __slots__ = ("method", "connect", "exchange", "busy", "final_data", "_waiter", "_loop")

    def __init__(self, method: str, connect: Connect, loop: asyncio.AbstractEventLoop) -> None:
        self.method, self.connect, self._loop = method, connect, loop
        self.exchange: Exchange | None = None  # a re-authentication in progress
        self.busy = False  # a step is being judged: the client must wait for our answer
        self.final_data: bytes | None = None  # for CONNACK
        self._waiter: asyncio.Future[None] | None = None

    def properties(self, data: bytes | None) -> dict[str, object]:
        """The method (always, [MQTT-4.12.0-5]) and the data, if any."""
        props: dict[str, object] = {"authentication_method": self.method}
        if data:
            props["authentication_data"] = data
        return props

    def packet(self, reason_code: int, data: bytes | None) -> bytes:
        return encode(Auth(reason_code, self.properties(data)), MQTT_5_0)

    async def wait(self) -> None:
        self._waiter = self._loop.create_future()
        await self._waiter
        self._waiter = None

    def wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
