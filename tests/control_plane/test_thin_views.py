"""Views stay thin (HackSoft): the REST API's views, the portal's pages and the control plane's
commands ask selectors and services; none builds a query of its own. Static, a fraction of a
second."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VIEWS = ("tenants/api", "tenants/portal", "control_plane")
# Query-building calls of Django's ORM (a queryset's or a related manager's).
QUERYSET_METHODS = {
    "filter",
    "exclude",
    "select_related",
    "prefetch_related",
    "annotate",
    "aggregate",
    "order_by",
    "values_list",
}
RUN_METHODS = {"all", "count", "exists"}  # called bare on a queryset or related manager
# Modules there that touch no database: the test fixtures' plugin, the development PKI's files.
NOT_VIEWS = {"pytest_plugin.py", "dev_pki.py"}


def orm_queries(path: Path) -> list[str]:
    """`file:line what` for each ORM query the module builds or runs."""
    tree = ast.parse(path.read_text(), filename=str(path))
    label = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Attribute) and node.attr == "objects":
            what = "Model.objects"
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "get_object_or_404":
                what = "get_object_or_404"
            elif isinstance(func, ast.Attribute) and func.attr in QUERYSET_METHODS:
                what = f".{func.attr}()"
            elif (
                isinstance(func, ast.Attribute)
                and func.attr in RUN_METHODS
                and not node.args
                and ast.unparse(func.value) != "itertools"
                and not ast.unparse(func.value).endswith("path")  # pathlib's exists()
            ):
                what = f".{func.attr}()"
        if what:
            found.append(f"{label}:{node.lineno} {what}")
    return found


def test_no_view_builds_a_query():
    hits = [
        hit
        for folder in VIEWS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "migrations" not in path.parts and path.name not in NOT_VIEWS
        for hit in orm_queries(path)
    ]
    assert hits == [], "ask a selector or a service instead:\n" + "\n".join(hits)


def test_the_check_sees_a_query(tmp_path):
    sample = tmp_path / "views.py"
    sample.write_text(
        "def view(request, tenant, device):\n"
        "    Device.objects.filter(tenant=tenant)\n"
        "    get_object_or_404(Device, name='x')\n"
        "    device.credentials.all()\n"
        "    itertools.count()\n"
    )
    assert sorted(hit.split()[-1] for hit in orm_queries(sample)) == sorted(
        [
            "Model.objects",
            ".filter()",
            "get_object_or_404",
            ".all()",
        ]
    )
