"""The live job's rules in groups of at most `PUSHDOWN_LIMIT`, each group a native plan of its own.

One plan of more rules than that costs Catalyst more than it saves (and its generated code
outgrows the JVM's 64 KB a method), so such a set had no native form at all: every micro-batch
was a Python pass, about 0.3 s whatever its size (bench/RESULTS.md, "Live rules"). In groups,
each group's rules are answered natively where they can be, and the groups run as one Spark job
(a union of their plans, `spark.rules.plan.collect_outputs`).

A tenant's rules stay in one group, so that its Python share (`tenant_share_seconds`, what its
rules may spend of one task) is spent in one evaluator. A tenant with more rules than one group
holds has them split over groups of its own, the share divided between them: the tenant's rules
never get more than one share of a task in all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark.rules.plan import RuleSpec

Group = tuple[list["RuleSpec"], float | None]  # the rules, and the share each tenant has in them


def rule_groups(specs: Sequence[RuleSpec], share: float | None, limit: int) -> list[Group]:
    """`specs` in groups of at most `limit` rules, tenants whole (in tenant order, so that a
    rule saved changes only its own tenant's group and the groups after it, rarely more)."""
    by_tenant: dict[str, list[RuleSpec]] = {}
    for spec in specs:
        by_tenant.setdefault(spec.tenant, []).append(spec)
    groups: list[Group] = []
    current: list[RuleSpec] = []
    for tenant in sorted(by_tenant):
        rules = sorted(by_tenant[tenant], key=lambda s: s.id)
        if len(rules) > limit:
            chunks = [rules[at : at + limit] for at in range(0, len(rules), limit)]
            part = None if share is None else share / len(chunks)
            groups += [(chunk, part) for chunk in chunks]
            continue
        if len(current) + len(rules) > limit:
            groups.append((current, share))
            current = []
        current.extend(rules)
    if current:
        groups.append((current, share))
    return groups
