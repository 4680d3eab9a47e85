"""Client-id globs: the same answers as fnmatch on `*`/`?` patterns, linear time on the inputs
that froze the old regex matcher, regex syntax refused, and the legacy regex conversion."""

from __future__ import annotations

import fnmatch
import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.access.client_id_pattern import (
    MAX_CLIENT_ID_LENGTH,
    PatternError,
    compile_pattern,
    from_legacy_regex,
    validate,
)


@given(st.text("ab*?", min_size=1, max_size=12), st.text("ab", max_size=20))
def test_globs_agree_with_fnmatch(pattern, client_id):
    expected = re.fullmatch(fnmatch.translate(pattern), client_id) is not None
    assert compile_pattern(pattern)(client_id) is expected


@pytest.mark.parametrize(
    "pattern, client_id",
    [
        ("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", "a" * MAX_CLIENT_ID_LENGTH),
        ("*?a?*?a?*?a?*?a?*?a?*?a?*?a?*?a?*?a?*?a?*c", "a" * MAX_CLIENT_ID_LENGTH),
        ("*" * 200 + "b", "a" * MAX_CLIENT_ID_LENGTH),
        ("a*", "a" * 65535),  # longer than any pattern may match: refused at once
    ],
)
def test_adversarial_inputs_take_microseconds(pattern, client_id):
    matcher = compile_pattern(pattern)
    started = time.perf_counter()
    for _ in range(100):
        matcher(client_id)
    assert (time.perf_counter() - started) / 100 < 0.001


@pytest.mark.parametrize(
    "pattern", ["(a+)+$", "gw-\\d+", "a|b", "[0-9]*", "x{3}", "", "a\\", "\x00"]
)
def test_regex_syntax_and_bad_patterns_are_refused_with_a_reason(pattern):
    with pytest.raises(PatternError) as error:
        validate(pattern)
    assert str(error.value)


@pytest.mark.parametrize(
    "regex, glob",
    [
        ("^sensor-.*$", "sensor-*"),
        ("gw-.+", "gw-?*"),
        (r"dev\.1", "dev.1"),
        (r"a\(b\)", r"a\(b\)"),
        ("(a+)+$", None),
        (r"gw-\d+", None),
        ("[a-z]+", None),
    ],
)
def test_legacy_regexes_convert_only_when_exact(regex, glob):
    assert from_legacy_regex(regex) == glob
    if glob is not None:
        assert compile_pattern(glob)
