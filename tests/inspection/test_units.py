"""The pieces of the inspection alone: payload previews, the topic tree, the broker's sample of
its sessions' figures, and the broker forgetting retained messages the control plane deleted."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.broker.retained import RetainedStore
from data_plane.tenancy.presence import Presence
from data_plane.tenancy.retained_forget import forget_retained
from data_plane.tenancy.session_figures import SessionFigures
from tenants.inspection.payload_preview import FETCH_BYTES, PREVIEW_BYTES, Preview, preview
from tenants.inspection.topic_tree import build
from tests.tenancy.test_presence import FakePool, conn


def test_payloads_are_previewed_as_json_text_or_hex_and_bounded():
    document = b'{"t":21.5,"unit":"C"}'
    assert preview(document, len(document)) == Preview("json", '{"t": 21.5, "unit": "C"}', False)
    shown = preview("température 21 °C\n".encode(), 20)
    assert (shown.encoding, shown.truncated) == ("text", False)
    assert shown.text == "température 21 °C\n"
    binary = bytes(range(250, 256)) + b"\x00\x01"
    assert preview(binary, len(binary)).text == "fa fb fc fd fe ff 00 01"
    assert preview(b"a\x00b", 3).encoding == "hex"  # control characters are not text
    assert preview(b"", 0).encoding == "empty"
    # A large payload: only its start was fetched; text cut inside a character stays text.
    head = ("é" * FETCH_BYTES).encode()[:FETCH_BYTES]
    big = preview(head, 1_000_000)
    assert big.encoding == "text" and big.truncated
    assert len(big.text.encode()) <= PREVIEW_BYTES
    # JSON only when the whole document was read: a cut one is text.
    cut = b'{"a": "' + b"x" * FETCH_BYTES
    assert preview(cut[:FETCH_BYTES], len(cut) + 2).encoding == "text"
    assert preview(b"42", 2).encoding == "text"  # a bare number reads as text


def test_the_topic_tree_has_a_node_per_level_with_what_is_kept_there():
    tree = build(["a/b/c", "a/b", "$SYS/x"], {"a/+/c": 2, "a/b": 1})
    assert [n["name"] for n in tree.roots] == ["$SYS", "a"]
    a = tree.roots[1]
    assert a["topic"] == "a" and not a["retained"] and a["subscriptions"] == 0
    plus, b = a["children"]
    assert (plus["topic"], plus["children"][0]["topic"]) == ("a/+", "a/+/c")
    assert plus["children"][0]["subscriptions"] == 2
    assert (b["retained"], b["subscriptions"]) == (True, 1)
    assert b["children"][0] == {
        "name": "c",
        "topic": "a/b/c",
        "retained": True,
        "subscriptions": 0,
        "messages_per_minute": None,
        "children": [],
    }
    assert tree.nodes == 7 and not tree.truncated
    cut = build([f"t/{i}" for i in range(10)], {}, max_nodes=5)
    assert cut.truncated and cut.nodes == 5


def test_a_sample_writes_only_the_figures_that_moved():
    figures = SessionFigures()
    busy = SimpleNamespace(queue=[1, 2, 3], inflight={1: 0, 2: 0})
    idle = SimpleNamespace(queue=[], inflight={})
    sessions = {"k1": busy, "k2": idle, "k3": None}
    first = asyncio.run(figures.sample(["k1", "k2", "k3", "gone"], sessions))
    assert first == [("k1", 3, 2)]  # rows start at (0, 0): nothing to write for the others
    assert figures.params(first) == (["k1"], [3], [2])
    figures.written(first)
    assert figures.changed(["k1", "k2"], sessions) == []
    busy.queue.clear()
    assert figures.changed(["k1"], sessions) == [("k1", 0, 2)]
    figures.forget("k1")
    assert figures.changed(["k1"], sessions) == [("k1", 0, 2)]


def test_the_broker_forgets_what_the_control_plane_deleted_and_clears_its_rows():
    store = RetainedStore()
    for tenant, topic in [("acme", "a/1"), ("acme", "a/2"), ("acme", "b"), ("evil", "a/1")]:
        store.set(Message(topic, b"v", 1, True, tenant=tenant))
    cleared: list[Message] = []
    storage = SimpleNamespace(retained_changed=cleared.append)
    broker = SimpleNamespace(retained=store, retained_storage=storage)
    assert forget_retained(broker, "acme", "a/#") == 2
    assert [m.topic for m in store.match("acme", "#")] == ["b"]
    assert [m.topic for m in store.match("evil", "#")] == ["a/1"]  # another tenant's stays
    assert [(m.topic, m.payload, m.tenant) for m in cleared] == [
        ("a/1", b"", "acme"),
        ("a/2", b"", "acme"),
    ]
    assert forget_retained(broker, "acme", "a/#/x") == 0  # malformed: nothing guessed


def test_presence_samples_figures_in_its_flush():
    """Presence with a fake pool: a sample rides in the flush after the connects it updates."""
    pool = FakePool()
    pool.up = True
    broker = SimpleNamespace(hooks=Hooks(), connections=[], cluster=SimpleNamespace(node_id="n1"))
    presence = Presence(broker, pool)
    assert presence.broker_id == "n1"  # the cluster's name for the node
    c = conn("d1")
    c.clean_start = False
    c.session.expiry_interval = 300
    c.session.queue, c.session.inflight = [1, 2], {7: 0}
    broker.connections.append(c)
    broker.hooks.run("client.connected", c)
    asyncio.run(presence.flush(figures=True))
    kinds = [s.split()[0] for s, _ in pool.statements]
    assert kinds == ["INSERT", "UPDATE"]
    up, sample = (params for _, params in pool.statements)
    assert up[0] == "n1" and list(up[-2:]) == [[False], [300]]  # clean start, expiry
    assert sample[1:] == ([2], [1])
    pool.statements.clear()
    asyncio.run(presence.flush(figures=True))
    assert pool.statements == []  # nothing moved: nothing written
