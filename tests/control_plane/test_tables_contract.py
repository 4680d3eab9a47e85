"""The written contract for the control plane's tables that other planes use
(`common/contracts/tables.py`): every SQL string outside `tenants/` names those tables through
it, and every name in it is a table the Django models make. Static checks: no database, a fraction of a second."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from django.apps import apps

from common.contracts import tables

ROOT = Path(__file__).resolve().parents[2]
# Everything that reaches the control plane's tables without Django (the control plane itself,
# tenants/, owns them and uses the ORM or its own SQL).
OUTSIDE = ("data_plane", "spark", "common", "bench", "control_plane")
TABLE = re.compile(r"\btenants_[a-z_]+\b")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (prose may name a table; SQL may not)."""
    found = set()
    for node in ast.walk(tree):
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr):
            found.add(id(node.body[0].value))
    return found


def literal_table_names(path: Path) -> list[str]:
    """`file:line name` for each string (f-strings' text included) naming a tenants_* table."""
    tree = ast.parse(path.read_text(), filename=str(path))
    prose = _docstrings(tree)
    label = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            hits += [f"{label}:{node.lineno} {name}" for name in TABLE.findall(node.value)]
    return hits


def test_no_sql_outside_the_control_plane_names_a_table_literally():
    contract = ROOT / "common" / "contracts" / "tables.py"
    hits = [
        hit
        for folder in OUTSIDE
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != contract
        for hit in literal_table_names(path)
    ]
    assert hits == [], "name these through common.contracts.tables:\n" + "\n".join(hits)


def test_the_check_sees_a_literal_in_sql(tmp_path):
    # The scan itself: a literal in plain and f-string SQL is found, a docstring's is not.
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Reads tenants_tenant (prose)."""\n'
        'A = "SELECT 1 FROM tenants_tenant"\n'
        'B = f"SELECT {A} FROM tenants_plan"\n'
    )
    assert [hit.split()[-1] for hit in literal_table_names(sample)] == [
        "tenants_tenant",
        "tenants_plan",
    ]


def test_every_name_in_the_contract_is_a_table_of_the_models():
    made = {model._meta.db_table for model in apps.get_models(include_auto_created=True)}
    assert [name for name in tables.ALL if name not in made] == []


def test_the_contract_lists_every_name_it_defines_once():
    defined = [value for key, value in vars(tables).items() if key.isupper() and key != "ALL"]
    assert sorted(defined) == sorted(tables.ALL)
    assert len(set(tables.ALL)) == len(tables.ALL)
