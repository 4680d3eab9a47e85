"""A tenant's topics as a tree of levels (`GET /api/v1/topics`, the portal's topic tree): the
topics it keeps retained messages on and the filters its sessions subscribe with, each level a
node. Pure: the selector gathers the topics and filters.

A node: `{name, topic, retained, subscriptions, messages_per_minute, children}`. `topic` is the
path from the root (a filter's `+` and `#` levels are nodes of their own); `retained` says a
retained message is kept on exactly that topic; `subscriptions` counts the sessions subscribed
with exactly that filter; `messages_per_minute` is the rate published on exactly that topic over
the last minutes (from the journey: `tenants.journey.selectors.topic_rates`), null where none was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MAX_NODES = 5000  # a tree larger than this is cut (`truncated`): ask for a narrower filter


@dataclass(slots=True)
class _Node:
    name: str
    topic: str
    retained: bool = False
    subscriptions: int = 0
    rate: float | None = None
    children: dict[str, _Node] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "topic": self.topic,
            "retained": self.retained,
            "subscriptions": self.subscriptions,
            "messages_per_minute": self.rate,
            "children": [self.children[k].as_dict() for k in sorted(self.children)],
        }


@dataclass(slots=True)
class TopicTree:
    roots: list[dict]
    nodes: int  # how many nodes the tree has
    truncated: bool  # some topics were left out (more than MAX_NODES nodes)


def build(
    retained: Iterable[str],
    subscriptions: Mapping[str, int],
    rates: Mapping[str, float] | None = None,
    max_nodes: int = MAX_NODES,
) -> TopicTree:
    """The tree of `retained` topics, subscription filters (filter -> sessions) and topics
    published lately (topic -> messages per minute)."""
    rates = rates or {}
    root = _Node("", "")
    count = 0
    truncated = False
    paths = {topic: (True, 0) for topic in retained}
    for topic_filter, sessions in subscriptions.items():
        kept, _ = paths.get(topic_filter, (False, 0))
        paths[topic_filter] = (kept, sessions)
    for topic in rates:
        paths.setdefault(topic, (False, 0))
    for path in sorted(paths):
        node = root
        levels = path.split("/")
        for depth, level in enumerate(levels):
            child = node.children.get(level)
            if child is None:
                if count >= max_nodes:
                    truncated = True
                    break
                child = node.children[level] = _Node(level, "/".join(levels[: depth + 1]))
                count += 1
            node = child
        else:
            node.retained, node.subscriptions = paths[path]
            node.rate = rates.get(path)
    roots = [root.children[k].as_dict() for k in sorted(root.children)]
    return TopicTree(roots=roots, nodes=count, truncated=truncated)
