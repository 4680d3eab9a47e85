"""The TLS listener's handshakes and records: Python's `ssl` (OpenSSL judging client
certificates against its store, as before issue 44) against `ClientCertificateContext`
(pyOpenSSL through `wrap_bio`, the chain left to CONNECT), on uvloop, over loopback: TLS 1.3
handshakes with a P-256 client certificate (sequential), 100-byte messages echoed in batches of
100, and 64 KiB echoed. A and B alternate (A-B-A-B) in one process; compare within a run.

.venv/bin/python bench/tls_listener.py [rounds]
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import tempfile
import time
from pathlib import Path

from common.security.device_credentials import make_ca, make_leaf, pem_of
from data_plane.tenancy.tls_client_chains import ClientCertificateContext


class Echo(asyncio.Protocol):
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


def files(folder: Path) -> dict[str, str]:
    server_ca, server_ca_key = make_ca("bench server CA")
    server, server_key = make_leaf(
        "localhost", server_ca, server_ca_key, server_names=["127.0.0.1"]
    )
    device_ca, device_ca_key = make_ca("bench device CA")
    device, device_key = make_leaf("sensor-1", device_ca, device_ca_key)
    paths = {}
    for name, value in {
        "server": server,
        "server_key": server_key,
        "server_ca": server_ca,
        "device": device,
        "device_key": device_key,
        "device_ca": device_ca,
    }.items():
        paths[name] = str(folder / f"{name}.pem")
        Path(paths[name]).write_text(pem_of(value))
    return paths


def context(kind: str, paths: dict[str, str]) -> ssl.SSLContext:
    if kind == "pyopenssl":
        return ClientCertificateContext(paths["server"], paths["server_key"])
    stdlib = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    stdlib.load_cert_chain(paths["server"], paths["server_key"])
    stdlib.verify_mode = ssl.CERT_OPTIONAL
    stdlib.load_verify_locations(paths["device_ca"])
    return stdlib


async def measure(kind: str, paths: dict[str, str]) -> tuple[float, float, float]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", 0, ssl=context(kind, paths))
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cafile=paths["server_ca"])
    client.load_cert_chain(paths["device"], paths["device_key"])

    async def connect():
        return await asyncio.open_connection("127.0.0.1", port, ssl=client)

    count, started = 200, time.perf_counter()
    for _ in range(count):
        reader, writer = await connect()
        writer.write(b"x")
        await reader.readexactly(1)
        writer.close()
    handshakes = count / (time.perf_counter() - started)
    reader, writer = await connect()
    batch, batches = b"m" * 100 * 100, 200
    started = time.perf_counter()
    for _ in range(batches):
        writer.write(batch)
        await reader.readexactly(len(batch))
    messages = 100 * batches / (time.perf_counter() - started)
    block, blocks = b"b" * 65536, 300
    started = time.perf_counter()
    for _ in range(blocks):
        writer.write(block)
        await reader.readexactly(len(block))
    megabytes = blocks * len(block) / (time.perf_counter() - started) / 1e6
    writer.close()
    server.close()
    return handshakes, messages, megabytes


def main() -> None:
    import uvloop

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with tempfile.TemporaryDirectory() as folder:
        paths = files(Path(folder))
        for _ in range(rounds):
            for kind in ("stdlib", "pyopenssl"):
                handshakes, messages, megabytes = uvloop.run(measure(kind, paths))
                print(
                    f"{kind:10} {handshakes:8,.0f} handshakes/s {messages:12,.0f} msgs/s"
                    f" (100 B, echoed) {megabytes:8,.1f} MB/s (64 KiB, echoed)"
                )


if __name__ == "__main__":
    main()
