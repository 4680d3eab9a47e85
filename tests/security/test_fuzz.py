"""The fuzzer of bench/fuzz.py, a short run in the suite (issue 20, point 3): the codec and the
connection state machine take hostile byte streams without a crash or an unhandled exception.
The long run (>= 1,000,000 inputs) is `python -m bench.fuzz`; its figures are in bench/RESULTS.md."""

from __future__ import annotations

import asyncio
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import fuzz
from common.mqtt.codec import Reader, encode
from common.mqtt.errors import MQTTError
from common.mqtt.packets import MQTT_3_1_1, MQTT_5_0


def test_a_short_fuzz_run_finds_nothing():
    summary = fuzz.fuzz(4000, seed=20, machine_share=0.3)
    assert summary["failures"] == 0, summary["first_failures"]
    assert summary["codec_inputs"] == 4000 and summary["machine_inputs"] > 800
    machine = summary["machine_outcomes"]
    # The inputs reach past CONNECT (accepted sessions) and into refusals alike.
    assert machine.get("machine:accepted:open", 0) + machine.get("machine:accepted:closed", 0) > 50
    assert machine.get("machine:refused:closed", 0) > 50
    assert summary["distinct_outcomes"] >= 30


def test_the_corpus_replays_cleanly():
    corpus = fuzz.load_corpus()
    assert len(corpus) >= 30
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        machine = fuzz.Machine()
        for data in corpus:
            fuzz.run_codec([data])
            loop.run_until_complete(machine.run([data]))
    finally:
        loop.close()
    assert machine.errors == []


def test_the_fuzzer_reports_a_crash(monkeypatch):
    """A codec that raises anything but MQTTError is caught and reported (the run can fail)."""
    original = Reader.feed

    def broken(self, data):
        if b"\x30" in bytes(data):  # any stream with a QoS 0 PUBLISH header byte
            raise KeyError("boom")
        return original(self, data)

    monkeypatch.setattr(Reader, "feed", broken)
    summary = fuzz.fuzz(300, seed=3, machine_share=0.0)
    assert summary["failures"] > 0 and "KeyError" in summary["first_failures"][0]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), version=st.sampled_from([MQTT_3_1_1, MQTT_5_0]))
def test_generated_packets_decode_or_fail_cleanly(seed, version):
    """Hypothesis drives the generator's choices: every packet the codec encodes decodes back to
    itself, and any mutation of it decodes or raises MQTTError, never anything else."""
    rng = random.Random(seed)
    connect = fuzz.connect(rng, version)
    try:
        stream = encode(connect, version)
        packet = fuzz.packet(rng, version)
        stream += encode(packet, version)
    except (MQTTError, ValueError, OverflowError, UnicodeEncodeError, KeyError, TypeError):
        return  # the encoder refused a field combination
    mutated = bytearray(stream)
    for _ in range(rng.randint(0, 4)):
        fuzz.mutate(rng, mutated, [])
    for data in (stream, bytes(mutated)):
        try:
            fuzz.run_codec(fuzz.chunks(rng, data))
        except MQTTError:
            pass
