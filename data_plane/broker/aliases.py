"""Outbound topic aliases (MQTT 5.0 §3.3.2.3.4): the broker's side of the client's Topic Alias
Maximum. The first delivery on a topic sends the topic and an alias; later ones only the alias.
Aliases are never reassigned: once the client's maximum is used up, new topics go in full.
A new alias is recorded only once the PUBLISH that sets it went out (`sent`): one skipped as
too large for the client must not leave an alias the client never saw."""

from __future__ import annotations


class OutboundAliases:
    __slots__ = ("maximum", "_aliases")

    def __init__(self, maximum: int = 0) -> None:
        self.maximum = maximum  # the client's Topic Alias Maximum (0: no aliases)
        self._aliases: dict[str, int] = {}

    def lookup(self, topic: str) -> tuple[int, bool] | None:
        """(alias, already known by the client) or None when aliases are not in use. A new
        alias (not known) is the client's once `sent`."""
        if not self.maximum:
            return None
        alias = self._aliases.get(topic)
        if alias is not None:
            return alias, True
        if len(self._aliases) >= self.maximum:
            return None
        return len(self._aliases) + 1, False

    def sent(self, topic: str, alias: int) -> None:
        """The PUBLISH setting `alias` for `topic` went out: the client knows it from now on."""
        self._aliases[topic] = alias
