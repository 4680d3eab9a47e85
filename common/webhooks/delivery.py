"""The rules' webhook call: a signed JSON POST. One implementation for the rule jobs
(spark/rules/actions.py) and the replay of dead letters (the control plane).

`X-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>` signs the exact body sent. Network
errors, 5xx and 429 are worth retrying; any other 4xx is final, and so is a redirect (never
followed: it could lead anywhere).

Where it may go is `common.webhooks.destinations`: the name is resolved once, every address vetted, and
the connection made to a vetted address (pinned: no second resolution), before a byte is sent.

Each attempt is bounded three ways (`Timeouts`): the connection (resolution, TCP and TLS), the
first byte of the answer, and the whole exchange; a receiver that answers a byte a second (a
tarpit) is cut at the total. The request is HTTP/1.1 over asyncio streams, so many calls can
wait at once on one thread (the live job's action lanes); `post_signed` is the blocking form.

Errors are words from a fixed vocabulary (`connection refused`, `no answer within 5 s`,
`HTTP 503`, ...): never an address, so a dead letter a tenant reads maps nothing of the
platform's network.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import hmac
import json
import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from common.webhooks.destinations import RefusedDestination, no_public_address, vet

USER_AGENT = "mqtt-platform-rules/1"
MAX_HEADER_BYTES = 16 << 10
_PATH_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))  # printable ASCII stays as written


@dataclass(frozen=True)
class Timeouts:
    connect: float = 3.0  # resolution, TCP and TLS
    first_byte: float = 5.0  # from the request sent to the answer's first byte
    total: float = 10.0  # the whole attempt


@dataclass(frozen=True)
class WebhookResult:
    ok: bool
    error: str = ""
    attempts: int = 1
    retry: bool = field(default=False, compare=False)  # worth another attempt later


def output_json(output: Any) -> str:
    return json.dumps(output, separators=(",", ":"), default=str)


def signed_request(
    url: str,
    secret: str,
    body: bytes,
    rule_id: int | None,
    headers: tuple[tuple[str, str], ...] = (),
) -> tuple[str, int, str, bytes, bool]:
    """(host, port, scheme, request bytes, tls) for one POST; ValueError for a bad URL.
    `rule_id` None: a call that is no rule's (a budget alert), without `X-Rule-Id`; `headers`
    are added as given (names and values the platform chose, never a tenant's)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"invalid url {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ValueError(f"invalid port in url {url!r}") from None
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    if parts.port:
        shown += f":{port}"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if any(c <= " " or c == "\x7f" for c in path):
        raise ValueError(f"invalid url {url!r}: spaces or control characters in its path")
    path = quote(path, safe=_PATH_SAFE)  # non-ASCII as %XX, the rest as written
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {shown}\r\nUser-Agent: {USER_AGENT}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"X-Signature-256: sha256={signature}\r\n"
        + ("" if rule_id is None else f"X-Rule-Id: {rule_id}\r\n")
        + "".join(f"{name}: {value}\r\n" for name, value in headers)
        + "Connection: close\r\n\r\n"
    )
    return (
        host,
        port,
        parts.scheme,
        head.encode("latin-1", "strict") + body,
        parts.scheme == "https",
    )


async def post_once(
    url: str,
    secret: str,
    output: Any,
    *,
    rule_id: int | None,
    timeouts: Timeouts = Timeouts(),
    body_text: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> WebhookResult:
    """One attempt. `body_text`, when given, is sent instead of `output` as JSON (the exact body
    an earlier call sent: a dead letter's replay)."""
    body = (output_json(output) if body_text is None else body_text).encode()
    try:
        host, port, _scheme, request, tls = signed_request(url, secret, body, rule_id, headers)
    except (ValueError, UnicodeEncodeError) as exc:
        return WebhookResult(False, f"webhook: {exc}")
    stage = ["connect"]
    try:
        async with asyncio.timeout(timeouts.total):
            status = await _exchange(host, port, tls, request, timeouts, stage)
    except RefusedDestination as exc:
        return WebhookResult(False, f"webhook: {exc}")  # final: it stays refused
    except TimeoutError:
        limits = {
            "connect": f"no connection within {timeouts.connect:g} s",
            "first_byte": f"no answer within {timeouts.first_byte:g} s",
        }
        words = limits.get(stage[0], f"no complete answer within {timeouts.total:g} s")
        return WebhookResult(False, f"webhook: {words}", retry=True)
    except Exception as exc:
        return WebhookResult(False, f"webhook: {_words(exc, host)}", retry=True)
    if 200 <= status < 300:
        return WebhookResult(True)
    error = f"webhook: HTTP {status}"
    if 300 <= status < 400:
        return WebhookResult(False, f"{error} (redirects are not followed)")
    return WebhookResult(False, error, retry=status >= 500 or status == 429)


async def _exchange(
    host: str, port: int, tls: bool, request: bytes, timeouts: Timeouts, stage: list[str]
) -> int:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeouts.connect):
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror:
            raise RefusedDestination(no_public_address(host)) from None
        addresses = vet(host, port, [str(info[4][0]) for info in infos])
        context = ssl.create_default_context() if tls else None
        reader = writer = None
        last: Exception | None = None
        for address in addresses:  # pinned: only these, never the name again
            try:
                reader, writer = await asyncio.open_connection(
                    address,
                    port,
                    ssl=context,
                    server_hostname=host if tls else None,
                    limit=MAX_HEADER_BYTES,
                )
                break
            except (OSError, ssl.SSLError) as exc:
                last = exc
        if reader is None or writer is None:
            raise last or ConnectionError("no connection")
    try:
        stage[0] = "first_byte"
        writer.write(request)
        async with asyncio.timeout(timeouts.first_byte):
            await writer.drain()
            line = await reader.readline()
        stage[0] = "total"
        if not line:  # closed with no answer: the request may still have been taken
            raise ConnectionResetError("the connection closed without an answer")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise _NotHttp()
        status = int(parts[1])
        seen = len(line)
        while True:  # the headers, bounded; the body is not needed
            header = await reader.readline()
            seen += len(header)
            if header in (b"\r\n", b"\n", b""):
                break
            if seen > MAX_HEADER_BYTES:
                break
        return status
    finally:
        writer.close()
        try:
            async with asyncio.timeout(0.5):
                await writer.wait_closed()
        except Exception:
            pass


class _NotHttp(Exception):
    pass


def _words(exc: BaseException, host: str) -> str:
    """An exception as words that name no address."""
    if isinstance(exc, _NotHttp):
        return "the answer is not HTTP"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "TLS: the certificate is not trusted"
    if isinstance(exc, ssl.SSLError):
        return "TLS handshake failed"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError)):
        return "connection closed before the answer"
    if isinstance(exc, asyncio.LimitOverrunError) or isinstance(exc, ValueError):
        return "the answer's headers are too long"
    if isinstance(exc, OSError) and exc.errno is not None and exc.errno in errno.errorcode:
        return f"network error ({errno.errorcode[exc.errno]})"
    return f"network error ({type(exc).__name__})"


async def post_signed_async(
    url: str,
    secret: str,
    output: Any,
    *,
    rule_id: int | None,
    attempts: int = 4,
    backoff: float = 0.25,
    timeouts: Timeouts = Timeouts(),
    body_text: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> WebhookResult:
    """Up to `attempts` attempts, back-off doubling from `backoff` seconds between them."""
    result = WebhookResult(False, "webhook: not attempted")
    attempts = max(1, attempts)
    for attempt in range(1, attempts + 1):
        result = await post_once(
            url,
            secret,
            output,
            rule_id=rule_id,
            timeouts=timeouts,
            body_text=body_text,
            headers=headers,
        )
        if result.ok or not result.retry or attempt == attempts:
            return WebhookResult(result.ok, result.error[:500], attempt, result.retry)
        await asyncio.sleep(backoff * 2 ** (attempt - 1))
    return result


def post_signed(
    url: str,
    secret: str,
    output: Any,
    *,
    rule_id: int | None,
    attempts: int = 4,
    backoff: float = 0.25,
    timeout: float | None = None,
    timeouts: Timeouts | None = None,
    body_text: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> WebhookResult:
    """`post_signed_async`, blocking (for a thread without a running event loop, or it runs in
    one of its own). `timeout` (older callers) bounds each attempt as a whole."""
    if timeouts is None:
        timeouts = (
            Timeouts()
            if timeout is None
            else Timeouts(min(3.0, timeout), min(5.0, timeout), timeout)
        )
    call = post_signed_async(
        url,
        secret,
        output,
        rule_id=rule_id,
        attempts=attempts,
        backoff=backoff,
        timeouts=timeouts,
        body_text=body_text,
        headers=headers,
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(call)
    box: list[WebhookResult] = []
    thread = threading.Thread(target=lambda: box.append(asyncio.run(call)), daemon=True)
    thread.start()
    thread.join()
    return box[0]
