"""Codec alone: decode and encode throughput of 1 KiB PUBLISH packets (packets/s).

.venv/bin/python bench/codec_micro.py
"""

from __future__ import annotations

import time

from common.mqtt.codec import Reader, encode, encode_publish
from common.mqtt.packets import Connect, Publish


def measure(label: str, func, count: int) -> None:
    started = time.perf_counter()
    func(count)
    elapsed = time.perf_counter() - started
    print(f"{label:44} {count / elapsed:>12,.0f} packets/s")


def main() -> None:
    payload = b"x" * 1024
    for version in (4, 5):
        for qos in (0, 1):
            packet = Publish("bench/topic/1", payload, qos, False, False, 1 if qos else None)
            wire = encode(packet, version)
            batch = wire * 100

            def decode(count: int, batch=batch, version=version) -> None:
                reader = Reader()
                reader.feed(encode(Connect("bench", version), version))
                for _ in range(count // 100):
                    reader.feed(batch)

            def encode_fast(count: int, qos=qos, version=version) -> None:
                topic = b"bench/topic/1"
                for index in range(count):
                    encode_publish(
                        topic,
                        payload,
                        qos,
                        False,
                        False,
                        index % 65535 + 1 if qos else None,
                        b"",
                        version,
                    )

            measure(f"decode PUBLISH 1 KiB QoS {qos} v{version}", decode, 200_000)
            measure(f"encode_publish 1 KiB QoS {qos} v{version}", encode_fast, 200_000)


if __name__ == "__main__":
    main()
