"""Client-certificate chains judged by the broker at the TLS handshake, not by OpenSSL's store.

Why: OpenSSL picks a certificate's issuer in its trust store by name (and by key identifier
when the certificate has one), then checks the signature of that one candidate only. With every
tenant's CAs in one store, a tenant that registered a CA (or a device certificate) under another
tenant's CA name could be picked as the issuer of that tenant's devices, and their handshakes
failed. Names and key identifiers are whatever a certificate's maker writes, so no store that
holds several tenants' anchors can choose between them by name. Python's `ssl` has no verify
callback, so OpenSSL's own hook for it (`SSL_CTX_set_cert_verify_callback`, which replaces the
whole chain verification) is set here through ctypes: OpenSSL still checks that the client holds
its certificate's key (CertificateVerify); the chain it sent is handed to `judge`, a quick
filter with no choice of issuer in it (`TrustAnchors.vouches_for`), and the device's identity
is decided at CONNECT by signature, per tenant (`identity.identify_certificate`).
"""

from __future__ import annotations

import _ssl
import ctypes
import logging
import ssl
from collections.abc import Callable

log = logging.getLogger(__name__)

# X509_V_ERR_CERT_UNTRUSTED: the handshake's alert says "bad certificate".
_CERT_UNTRUSTED = 27
# At most this many certificates of a chain are looked at (the device's and its intermediates).
MAX_CERTIFICATES = 8

# Python's verify modes as OpenSSL's SSL_VERIFY_* flags.
_SSL_VERIFY = {ssl.CERT_NONE: 0, ssl.CERT_OPTIONAL: 1, ssl.CERT_REQUIRED: 3}

_VerifyCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _libssl() -> ctypes.CDLL | None:
    """OpenSSL as `_ssl` links it (so the very library that runs the handshakes)."""
    try:
        lib = ctypes.CDLL(_ssl.__file__)
        signatures = {
            "SSL_CTX_set_cert_verify_callback": (
                None,
                [ctypes.c_void_p, _VerifyCallback, ctypes.c_void_p],
            ),
            "SSL_CTX_get_verify_mode": (ctypes.c_int, [ctypes.c_void_p]),
            "SSL_CTX_get_options": (ctypes.c_uint64, [ctypes.c_void_p]),
            "X509_STORE_CTX_get0_cert": (ctypes.c_void_p, [ctypes.c_void_p]),
            "X509_STORE_CTX_get0_untrusted": (ctypes.c_void_p, [ctypes.c_void_p]),
            "X509_STORE_CTX_set_error": (None, [ctypes.c_void_p, ctypes.c_int]),
            "OPENSSL_sk_num": (ctypes.c_int, [ctypes.c_void_p]),
            "OPENSSL_sk_value": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
            "i2d_X509": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
        }
        for name, (restype, argtypes) in signatures.items():
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
    except (OSError, AttributeError) as exc:
        log.warning("OpenSSL's functions are not reachable from Python: %s", exc)
        return None
    return lib


def _ssl_ctx(lib: ctypes.CDLL, context: ssl.SSLContext) -> int | None:
    """The `SSL_CTX *` inside `context`: CPython's context object holds it right after the
    object header (so since Python 3.2). Trusted only if OpenSSL reads back, from that address,
    the verify mode and options Python has set (which differ from OpenSSL's defaults)."""
    address = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not address:
        return None
    if lib.SSL_CTX_get_verify_mode(address) != _SSL_VERIFY[context.verify_mode]:
        return None
    if lib.SSL_CTX_get_options(address) != int(context.options):
        return None
    return address


def _der(lib: ctypes.CDLL, x509: int) -> bytes:
    size = lib.i2d_X509(x509, None)
    if size <= 0:
        return b""
    buffer = ctypes.create_string_buffer(size)
    cursor = ctypes.c_void_p(ctypes.addressof(buffer))
    lib.i2d_X509(x509, ctypes.byref(cursor))  # writes at *cursor (and moves it on)
    return buffer.raw


def _presented(lib: ctypes.CDLL, store_ctx: int) -> list[bytes]:
    """The chain the client sent, its own certificate first (DER)."""
    leaf = lib.X509_STORE_CTX_get0_cert(store_ctx)
    chain = [_der(lib, leaf)] if leaf else []
    sent = lib.X509_STORE_CTX_get0_untrusted(store_ctx)  # what it sent, its own included
    for index in range(min(lib.OPENSSL_sk_num(sent), MAX_CERTIFICATES) if sent else 0):
        x509 = lib.OPENSSL_sk_value(sent, index)
        if x509 and x509 != leaf:
            chain.append(_der(lib, x509))
    return chain


def judge_chains(context: ssl.SSLContext, judge: Callable[[list[bytes]], bool]) -> bool:
    """Have `judge(chain)` (DER, the client's certificate first) accept or refuse each client
    certificate chain `context`'s handshakes receive, in place of OpenSSL's verification against
    its store. False, and nothing changed, where OpenSSL cannot be reached this way."""
    lib = _libssl()
    address = _ssl_ctx(lib, context) if lib is not None else None
    if address is None:
        return False

    def verify(store_ctx: int, _arg: int) -> int:
        try:
            if judge(_presented(lib, store_ctx)):
                return 1
        except Exception:  # an exception must not escape into OpenSSL: refuse
            log.exception("client certificate chain check failed")
        lib.X509_STORE_CTX_set_error(store_ctx, _CERT_UNTRUSTED)
        return 0

    callback = _VerifyCallback(verify)
    # OpenSSL keeps only the C pointer: the callback lives as long as the context does.
    context._client_chain_judge = callback  # type: ignore[attr-defined]
    lib.SSL_CTX_set_cert_verify_callback(address, callback, None)
    return True
