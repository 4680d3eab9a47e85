"""EMQX's rule SQL, compiled once into Python closures and evaluated on archive rows.

One set of semantics for the API's dry run and the Spark jobs:

    rule = compile_rule('SELECT payload.t AS t FROM "s/+/temp" WHERE payload.t > 30')
    rule.reads("message.publish", "s/1/temp")         # does FROM take this row?
    rule.apply(row)                                    # -> RuleResult(matched, outputs, error)
    dry_run(sql, {"topic": "s/1/temp", "payload": '{"t": 31}'})
    render_template("alerts/${clientid}", output)

For readers (the Spark jobs): `rule.topic_filters` / `rule.events` say which rows FROM takes,
`rule.archive_columns` which archive columns evaluation may read (prune the rest), and
`common.rules.topics.topic_filter_regex` (the codec's one translation) turns a filter into a
pushdown prefilter; `apply` checks FROM again, so a prefilter never decides. A CompiledRule
pickles as its SQL.

See docs/rules.md for the dialect. This package imports only the stdlib, lark, regex and
`common.*`: it never becomes Spark SQL text, so a rule can reach nothing the compiler did not put
in its plan.
"""

from common.rules.budget import Budget, BudgetExceeded, default_budget
from common.rules.compiler import CompiledRule, RuleResult, compile_rule
from common.rules.dry_run import dry_run
from common.rules.errors import RuleRuntimeError, RuleSyntaxError
from common.rules.templates import render_template

__all__ = [
    "Budget",
    "BudgetExceeded",
    "CompiledRule",
    "RuleResult",
    "RuleRuntimeError",
    "RuleSyntaxError",
    "compile_rule",
    "default_budget",
    "dry_run",
    "render_template",
]
