"""`aliases.OutboundAliases`: the broker's side of the client's Topic Alias Maximum."""

from data_plane.broker.aliases import OutboundAliases


def test_a_topic_gets_an_alias_then_is_known_and_none_once_the_maximum_is_used():
    aliases = OutboundAliases(maximum=2)
    assert aliases.lookup("a") == (1, False)
    aliases.sent("a", 1)
    assert aliases.lookup("a") == (1, True)
    assert aliases.lookup("b") == (2, False)
    aliases.sent("b", 2)
    assert aliases.lookup("c") is None  # never reassigned: sent in full
    assert aliases.lookup("b") == (2, True)


def test_an_alias_is_the_clients_only_once_the_publish_setting_it_was_sent():
    aliases = OutboundAliases(maximum=2)
    assert aliases.lookup("a") == (1, False)  # that PUBLISH was skipped (too large)
    assert aliases.lookup("a") == (1, False)  # so the next one sets it again


def test_no_aliases_when_the_client_allows_none():
    assert OutboundAliases().lookup("a") is None
