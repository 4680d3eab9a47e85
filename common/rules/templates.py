"""EMQX's `${field}` templates for republish topics and payloads and webhook bodies.

`${clientid}`, `${payload.a.b}`, `${a[1]}` (1-based, negative from the end), `${pub_props.'User-Property'}`
(quoted keys) look into a rule's output; a string met on the way is read as JSON when it is JSON (so `${payload.t}` works when
`payload` was selected raw). A missing value renders as `undefined`, as in EMQX; maps and arrays
render as compact JSON, numbers and booleans as in `str()`. `${.}` is the whole output as JSON.
"""

from __future__ import annotations

import re
from typing import Any

from common.rules.paths import _get_index, _get_key
from common.rules.values import json_encode, to_str

_PLACEHOLDER = re.compile(r"\$\{\s*([^}]*?)\s*\}")
_STEP = re.compile(r"""\.?(?:'([^']*)'|"([^"]*)"|([^.\[\]'"]+))|\[(-?\d+)\]""")


def lookup(output: dict[str, Any], path: str) -> Any:
    if path == ".":
        return output
    data: Any = output
    pos = 0
    while pos < len(path):
        match = _STEP.match(path, pos)
        if not match:
            return None
        single, double, bare, index = match.groups()
        key = single if single is not None else double if double is not None else bare
        data = _get_key(data, key) if key is not None else _get_index(data, int(index))
        if data is None:
            return None
        pos = match.end()
    return data


def render_template(template: str, output: dict[str, Any]) -> str:
    """Fill `${...}` placeholders of `template` from a rule output."""

    def fill(match: re.Match[str]) -> str:
        value = lookup(output, match.group(1))
        if isinstance(value, (dict, list)):
            return json_encode(value)
        return to_str(value)

    return _PLACEHOLDER.sub(fill, template)
