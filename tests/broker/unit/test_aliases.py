"""`aliases.OutboundAliases`: the broker's side of the client's Topic Alias Maximum."""

from data_plane.broker.aliases import OutboundAliases


def test_a_topic_gets_an_alias_then_is_known_and_none_once_the_maximum_is_used():
    aliases = OutboundAliases(maximum=2)
    assert aliases.lookup("a") == (1, False)
    assert aliases.lookup("a") == (1, True)
    assert aliases.lookup("b") == (2, False)
    assert aliases.lookup("c") is None  # never reassigned: sent in full
    assert aliases.lookup("b") == (2, True)


def test_no_aliases_when_the_client_allows_none():
    assert OutboundAliases().lookup("a") is None
