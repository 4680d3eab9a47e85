"""bench.payload_codecs: the table it prints covers every codec and the per-byte costs, and its
two payloads compress the way bench/RESULTS.md says (device JSON a few times, filler to nothing)."""

from bench import payload_codecs


def _ratio(table, label):
    return float(next(ratio for name, _ns, ratio in table if name == label).split(":")[0])


def test_every_codec_and_cost_is_timed():
    table = payload_codecs.rows(payload_codecs.sample("json", 1)[: 64 * 1024], repeat=1)
    labels = [label for label, _ns, _ratio in table]
    assert labels[: len(payload_codecs.CODECS)] == [
        name if level is None else f"{name} {level}" for name, level in payload_codecs.CODECS
    ]
    assert labels[-3:] == ["SHA-256", "CRC32", "fresh memory"]
    assert all(ns > 0 for _label, ns, _ratio in table)


def test_device_json_compresses_a_few_times_and_filler_to_nothing():
    json_table = payload_codecs.rows(payload_codecs.sample("json", 1), repeat=1)
    filler_table = payload_codecs.rows(payload_codecs.sample("filler", 1), repeat=1)
    assert 2.5 < _ratio(json_table, "lz4_raw") < 6
    assert _ratio(filler_table, "lz4_raw") > 100
    # zstd's fast levels trade ratio for speed: the fastest listed barely compresses JSON.
    assert _ratio(json_table, "zstd -100") < _ratio(json_table, "zstd -1")
