"""Topic filters as rule sources: validation, matching, and the one filter-to-regex translation
(`common.mqtt.topics.topic_filter_regex`) agreeing with the MQTT matcher on generated filters and
topics (hypothesis), in Python's `re` and in RE2 (DuckDB, as the journey and previews use it)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.rules.topics import topic_filter_problem, topic_filter_regex, topic_match

LEVEL = st.text(alphabet="ab$.*()[]^\\-_ é€?{}|\n", max_size=3)
TOPIC = st.lists(LEVEL, min_size=1, max_size=4).map("/".join)
FILTER_LEVEL = st.one_of(LEVEL.filter(lambda s: "+" not in s and "#" not in s), st.just("+"))
FILTER = st.tuples(st.lists(FILTER_LEVEL, min_size=0, max_size=4), st.booleans()).map(
    lambda parts: "/".join(parts[0] + (["#"] if parts[1] else [])) or "#"
)


@settings(max_examples=400, deadline=None)
@given(FILTER, TOPIC)
def test_regex_agrees_with_matcher(topic_filter, topic):
    assert topic_filter_problem(topic_filter) is None
    pattern = re.compile(topic_filter_regex(topic_filter))
    assert bool(pattern.fullmatch(topic)) == topic_match(topic, topic_filter)


@pytest.fixture(scope="module")
def duckdb_connection():
    import duckdb

    connection = duckdb.connect()
    yield connection
    connection.close()


@settings(max_examples=200, deadline=None)
@given(topic_filter=FILTER, topics=st.lists(TOPIC, min_size=1, max_size=8))
def test_regex_agrees_with_matcher_in_re2(duckdb_connection, topic_filter, topics):
    """RE2 (no look-ahead, no escape before a non-ASCII character) reads the same regex alike."""
    got = duckdb_connection.execute(
        "SELECT t, regexp_full_match(t, ?) FROM unnest(?::VARCHAR[]) AS u(t)",
        [topic_filter_regex(topic_filter), topics],
    ).fetchall()
    assert [matched for _, matched in got] == [topic_match(t, topic_filter) for t in topics]


@pytest.mark.parametrize(
    "topic, topic_filter, expected",
    [
        ("a/b", "a/b", True),
        ("a/b", "a/+", True),
        ("a", "a/#", True),
        ("a/b/c", "a/#", True),
        ("b/a", "a/#", False),
        ("a/b/c", "a/+", False),
        ("$SYS/x", "#", False),
        ("$SYS/x", "+/x", False),
        ("$SYS/x", "$SYS/#", True),
        ("/x", "+/x", True),
        ("a.b", "a*b", False),
    ],
)
def test_topic_match_examples(topic, topic_filter, expected):
    assert topic_match(topic, topic_filter) is expected
    assert bool(re.fullmatch(topic_filter_regex(topic_filter), topic)) is expected


@pytest.mark.parametrize(
    "topic_filter, problem",
    [
        ("", "empty"),
        ("a/#/b", "'#' must be the last"),
        ("a#", "'#' must be the last"),
        ("a/b+", "'+' must occupy"),
        ("a\x00b", "U+0000"),
        ("x" * 70000, "longer than 65535"),
    ],
)
def test_invalid_filters(topic_filter, problem):
    assert problem in topic_filter_problem(topic_filter)
