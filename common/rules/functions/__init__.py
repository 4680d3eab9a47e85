"""EMQX's rule SQL built-in functions (emqx_rule_funcs / emqx_variform_bif), one module a family.

Each function takes already-evaluated arguments and returns a value of the dialect (see
`common.rules.values`); importing this package registers them all. The compiler and the parser
read the registry: `FUNCTIONS` (SQL name -> function), `ARITIES` (name -> (least, most)
arguments) and `CONTEXT_FUNCTIONS` (the names whose function gets the row first).

    registry     the registry, `_register`, and the argument checks every family shares
    context      the message itself: topic(), clientid(), payload(), ...; null, coalesce
    numeric      math, integer bit operations, bits of binary data (subbits)
    conversion   conversions between types, and the type checks (is_*)
    strings      strings: case, trim, split, pad, replace, join, unescape
    patterns     regular expressions, time-limited
    sprintf      sprintf / sprintf_s (Erlang's io_lib:format)
    containers   maps and arrays
    encoding     digests, compression, base64, JSON text, UUIDs
    dates        time: now, epoch timestamps, RFC 3339 and format_date, offsets

Left out on purpose (compile error naming why): getenv (server environment), kv_store_* and
proc_dict_* (state shared across messages and tenants), jq, term_encode/term_decode, mongo_date.
"""

# Importing a family registers its functions.
from common.rules.functions import (  # noqa: F401
    containers,
    context,
    conversion,
    dates,
    encoding,
    numeric,
    patterns,
    sprintf,
    strings,
)
from common.rules.functions.registry import ARITIES, CONTEXT_FUNCTIONS, FUNCTIONS

__all__ = ["ARITIES", "CONTEXT_FUNCTIONS", "FUNCTIONS"]
