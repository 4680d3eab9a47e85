"""The TLS listeners' handshakes, done by pyOpenSSL so that the broker, not OpenSSL's trust
store, judges client certificate chains (issue 44).

Why not Python's `ssl`: a server that asks for a client certificate (`CERT_OPTIONAL`) makes
OpenSSL verify the chain against the context's store and fail the handshake when that fails, and
Python offers no verify callback. OpenSSL picks a certificate's issuer in its store by name (and
key identifier), both of which a certificate's maker writes, then checks that one candidate's
signature: with every tenant's CAs in one store, a CA one tenant registers under another's CA
name fails that tenant's devices (`tests/security/test_colliding_ca_subjects.py`). A store per
tenant chosen by SNI closes this for clients that name their tenant's endpoint, but not for those
that send no server name (devices that connect by IP address, most test clients).

So the handshake runs on pyOpenSSL (a maintained binding) with its public verify callback, which
accepts the chain as sent: OpenSSL still checks the CertificateVerify message (the client holds
its certificate's key), and the verdict on the chain (per tenant, by signature, with name
constraints, key sizes, validity and CA:FALSE leaves) is given at CONNECT by `cryptography`'s
X.509 verifier (`identity.identify_certificate`), off the event loop with a deadline.

How it plugs into asyncio (and uvloop) with public interfaces only: the listener's context is an
`ssl.SSLContext` whose `wrap_bio` (what the event loop's TLS protocol calls for each connection,
with its incoming and outgoing `ssl.MemoryBIO`) returns `TLSObject`, an `ssl.SSLObject` look-alike
over a pyOpenSSL connection. No ctypes, no private structures, no private `_sslobj`.

The server name a client sends (SNI) picks its tenant, as AWS IoT Core picks an account by its
endpoint name: `{tenant}.{MQTT_TLS_DOMAIN}` (`endpoint_tenant`); such a client is then that
tenant's device or nobody's, whatever its certificate or user name says. If pyOpenSSL is missing
the TLS listener does not start (`client_certificate_context` raises): there is no fallback to a
shared store.
"""

from __future__ import annotations

import logging
import re
import ssl
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding

log = logging.getLogger(__name__)

try:  # pragma: no branch - a dependency; without it the TLS listener refuses to start
    from OpenSSL import SSL, crypto
except ImportError:  # pragma: no cover
    SSL = crypto = None  # type: ignore[assignment]

# At most this many certificates of a chain are kept (the device's and its intermediates).
MAX_CERTIFICATES = 8
# A tenant's slug as it may stand in a host name label.
_SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_READ = 65536
_RECORD = 16384  # the most plaintext one TLS record holds
_DER = Encoding.DER
# TLS 1.2's cipher suites: Python's default for its contexts (TLS 1.3's are OpenSSL's).
_CIPHERS = (
    b"@SECLEVEL=2:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:DHE+AES:!aNULL:!eNULL:!aDSS:!SHA1:!AESCCM"
)


class UnavailableError(RuntimeError):
    """The TLS listener cannot judge client certificates itself: it must not start."""


def endpoint_tenant(server_name: str | None, domain: str | None) -> str | None:
    """The tenant a server name (SNI) names: `acme` for `acme.{domain}`; None for any other name
    (the broker's own name, an IP address, none)."""
    if not server_name or not domain:
        return None
    name, suffix = server_name.lower().rstrip("."), "." + domain.lower().strip(".")
    if not name.endswith(suffix):
        return None
    label = name[: -len(suffix)]
    return label if _SLUG.fullmatch(label) else None


class ClientCertificateContext(ssl.SSLContext):
    """A server `SSLContext` whose connections are pyOpenSSL's (`TLSObject`): they ask for a
    client certificate, accept any chain the client proves it holds the key of, and remember
    the tenant the server name names. Only `wrap_bio` is used (by the event loop's TLS
    protocol); the stdlib half of this object is never handed a connection."""

    openssl: Any
    domain: str | None

    def __new__(cls, cert: str, key: str, domain: str | None = None) -> ClientCertificateContext:
        if SSL is None:
            raise UnavailableError(
                "pyOpenSSL is not installed: the TLS listener cannot verify client certificates"
            )
        self = super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)
        context = SSL.Context(SSL.TLS_SERVER_METHOD)
        context.set_min_proto_version(SSL.TLS1_2_VERSION)
        context.use_certificate_chain_file(cert)
        context.use_privatekey_file(key)
        context.check_privatekey()
        # As Python's `ssl` sets up a server context (3.10+), client renegotiation refused.
        context.set_options(
            SSL.OP_ALL
            | SSL.OP_NO_SSLv3
            | SSL.OP_NO_COMPRESSION
            | SSL.OP_CIPHER_SERVER_PREFERENCE
            | SSL.OP_NO_RENEGOTIATION
        )
        context.set_cipher_list(_CIPHERS)
        context.set_verify(SSL.VERIFY_PEER, _accept_chain)  # requested, judged at CONNECT
        context.set_verify_depth(MAX_CERTIFICATES)
        context.set_tlsext_servername_callback(_server_name)
        self.openssl, self.domain = context, domain
        self.minimum_version = ssl.TLSVersion.TLSv1_2
        self.load_cert_chain(cert, key)  # the stdlib half agrees, should anything read it
        return self

    def wrap_bio(  # type: ignore[override]
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | None = None,
        session: Any = None,
    ) -> TLSObject:
        if not server_side:
            raise ValueError("a client-certificate context serves only the server side")
        return TLSObject(self, incoming, outgoing)


def _accept_chain(_conn: Any, _cert: Any, _errno: int, _depth: int, _ok: int) -> bool:
    """OpenSSL's verdict on the chain is not the broker's: every chain goes on to CONNECT,
    where `identity.identify_certificate` judges it per tenant."""
    return True


def _server_name(conn: Any) -> None:
    tls = conn.get_app_data()
    name = conn.get_servername()
    if tls is not None and name:
        tls.server_name = name.decode("ascii", "replace")


def _translated(exc: Exception) -> Exception:
    """pyOpenSSL's exceptions as `ssl`'s, which the event loop's TLS protocol expects."""
    if isinstance(exc, SSL.WantReadError | SSL.WantWriteError):
        return ssl.SSLWantReadError(ssl.SSL_ERROR_WANT_READ, "read would block")
    if isinstance(exc, SSL.ZeroReturnError):
        return ssl.SSLZeroReturnError(ssl.SSL_ERROR_ZERO_RETURN, "TLS connection closed")
    if isinstance(exc, SSL.SysCallError):
        return ssl.SSLEOFError(ssl.SSL_ERROR_EOF, "EOF occurred in violation of protocol")
    return ssl.SSLError(ssl.SSL_ERROR_SSL, str(exc) or "TLS error")


class TLSObject:
    """What `ssl.SSLObject` offers the event loop, over a pyOpenSSL connection with memory
    BIOs: bytes travel between the loop's `MemoryBIO`s and pyOpenSSL's at each call."""

    server_side = True
    server_hostname = None

    def __init__(
        self, context: ClientCertificateContext, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO
    ) -> None:
        self.context = context
        self.server_name: str | None = None  # the SNI the client sent
        self._incoming, self._outgoing = incoming, outgoing
        self._eof_passed = False
        # Whether pyOpenSSL's BIO may still hold records: the loop asks `pending()` (its own
        # BIO's count plus SSL_pending, for `ssl`) before it reads, and `_call` empties its BIO.
        self._buffered = False
        self._conn = SSL.Connection(context.openssl, None)
        self._conn.set_app_data(self)
        self._conn.set_accept_state()

    @property
    def endpoint_tenant(self) -> str | None:
        return endpoint_tenant(self.server_name, self.context.domain)

    def _call(self, function: Any, *args: Any) -> Any:
        data = self._incoming.read()
        if data:
            self._conn.bio_write(data)
        if self._incoming.eof and not self._eof_passed:
            self._eof_passed = True
            self._conn.bio_shutdown()
        try:
            result = function(*args)
        except SSL.WantReadError:
            self._buffered = False  # OpenSSL has read all it was given
            raise ssl.SSLWantReadError(ssl.SSL_ERROR_WANT_READ, "read would block") from None
        except SSL.Error as exc:
            raise _translated(exc) from None
        finally:
            self._flush()
        self._buffered = True
        return result

    def _flush(self) -> None:
        while True:
            try:
                data = self._conn.bio_read(_READ)
            except SSL.WantReadError:
                return
            self._outgoing.write(data)
            if len(data) < _READ:  # emptied: no second call (and its exception) needed
                return

    def do_handshake(self) -> None:
        self._call(self._conn.do_handshake)

    def read(self, length: int = 1024, buffer: Any = None) -> Any:
        """Like `ssl.SSLObject.read`: the client's close_notify reads as the end (b"" or 0)."""
        length = min(length, _RECORD)  # OpenSSL returns a record at most: no larger buffer
        try:
            if buffer is None:
                return self._call(self._conn.recv, length)
            return self._call(self._conn.recv_into, buffer, length)
        except ssl.SSLZeroReturnError:
            return b"" if buffer is None else 0

    def write(self, data: Any) -> int:
        sent: int = self._call(self._conn.send, data)
        return sent

    def pending(self) -> int:
        return self._conn.pending() or int(self._buffered)

    def unwrap(self) -> None:
        if not self._call(self._conn.shutdown):  # sent ours; the client's close_notify to come
            raise ssl.SSLWantReadError(ssl.SSL_ERROR_WANT_READ, "read would block")

    def getpeercert(self, binary_form: bool = False) -> Any:
        cert = self._conn.get_peer_certificate(as_cryptography=True)
        if cert is None:
            return None
        if binary_form:
            return cert.public_bytes(_DER)
        return {}  # as `ssl` says of a certificate it did not validate

    def get_unverified_chain(self) -> list[bytes]:
        """The chain as the client sent it (DER, its own certificate first): the name and
        meaning of `ssl.SSLObject.get_unverified_chain` (Python 3.13)."""
        leaf = self.getpeercert(binary_form=True)
        if not leaf:
            return []
        # On a server, OpenSSL's peer chain is what came with the client's certificate.
        sent = self._conn.get_peer_cert_chain(as_cryptography=True) or []
        chain = [leaf] + [c.public_bytes(_DER) for c in sent]
        return [der for i, der in enumerate(chain) if i == 0 or der != leaf][:MAX_CERTIFICATES]

    def get_verified_chain(self) -> list[bytes]:
        return []  # OpenSSL verified nothing: CONNECT does (`identity.identify_certificate`)

    def cipher(self) -> tuple[str, str, int] | None:
        name = self._conn.get_cipher_name()
        if name is None:
            return None
        return name, self._conn.get_cipher_version() or "", self._conn.get_cipher_bits() or 0

    def shared_ciphers(self) -> None:
        return None

    def compression(self) -> None:
        return None

    def version(self) -> str | None:
        return self._conn.get_protocol_version_name()

    def selected_alpn_protocol(self) -> str | None:
        chosen = self._conn.get_alpn_proto_negotiated()
        return chosen.decode("ascii", "replace") if chosen else None

    def selected_npn_protocol(self) -> None:
        return None

    def get_channel_binding(self, cb_type: str = "tls-unique") -> None:
        return None
