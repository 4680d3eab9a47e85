"""`make run`'s development PKI, so a newcomer can try MQTT over TLS with a client certificate.

With `MQTT_TLS_PORT` set and no `MQTT_TLS_CERT`, `runplatform` makes (once, under
`.data/dev-pki/`) a development CA, a server certificate for localhost/127.0.0.1 signed by it, and a
certificate for the demo device (CN = its name), and registers the CA for the demo tenant. Never
for production: the CA's key sits beside it, unencrypted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.security.device_credentials import make_ca, make_leaf, pem_of


@dataclass(frozen=True)
class DevPki:
    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path
    device_cert: Path
    device_key: Path


def ensure(directory: Path, device: str) -> DevPki:
    """The files, made once (re-used across runs so a configured client keeps working)."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = DevPki(
        directory,
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / f"{device}.pem",
        directory / f"{device}.key",
    )
    if all(p.exists() for p in (pki.ca, pki.server_cert, pki.server_key)):
        if not pki.device_cert.exists():
            from cryptography import x509
            from cryptography.hazmat.primitives import serialization

            ca_cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
            ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
            _write_device(pki, device, ca_cert, ca_key)
        return pki
    ca_cert, ca_key = make_ca("MQTT platform development CA")
    _write(pki.ca, pem_of(ca_cert))
    _write(directory / "ca.key", pem_of(ca_key))
    server, server_key = make_leaf(
        "localhost", ca_cert, ca_key, server_names=["localhost", "127.0.0.1"]
    )
    _write(pki.server_cert, pem_of(server))
    _write(pki.server_key, pem_of(server_key))
    _write_device(pki, device, ca_cert, ca_key)
    return pki


def _write_device(pki: DevPki, device: str, ca_cert, ca_key) -> None:
    cert, key = make_leaf(device, ca_cert, ca_key)
    _write(pki.device_cert, pem_of(cert))
    _write(pki.device_key, pem_of(key))


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    if path.suffix == ".key":
        path.chmod(0o600)


def verification(pki: DevPki, code: str) -> str:
    """A verification certificate for registering the development CA (CN = registration code)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca_cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    ca_key = serialization.load_pem_private_key((pki.directory / "ca.key").read_bytes(), None)
    cert, _key = make_leaf(code, ca_cert, ca_key, days=1)
    return pem_of(cert)
