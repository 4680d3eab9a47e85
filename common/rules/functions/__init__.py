"""EMQX's rule SQL built-in functions: the registry the compiler and the parser read.

Being split into modules by family; for now all of them are in `strings`.
"""

from common.rules.functions.strings import ARITIES, CONTEXT_FUNCTIONS, FUNCTIONS

__all__ = ["ARITIES", "CONTEXT_FUNCTIONS", "FUNCTIONS"]
