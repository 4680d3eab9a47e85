"""The portal's templates hold nothing its Content-Security-Policy blocks (script-src and
style-src 'self', control_plane/security_headers.py): no inline <script>, no on…= handler, no
style attribute or <style> element. The browser would drop each silently, and the behaviour with
it (tests/portal/test_portal_csp_browser.py sees that for the pages it visits; this sees every
template)."""

import re
from pathlib import Path

import pytest

PORTAL = Path(__file__).resolve().parents[2] / "tenants" / "templates" / "portal"
BLOCKED = {
    "inline script": re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I),
    "event handler attribute": re.compile(r"<[a-z][^>]*\son[a-z]+\s*=", re.I),
    "style attribute": re.compile(r"<[a-z][^>]*\sstyle\s*=", re.I),
    "style element": re.compile(r"<style\b", re.I),
}


# Rendered into a PDF by WeasyPrint (tenants/billing/invoice_render.py), never served to a browser.
NOT_SERVED = {"invoice_pdf.html"}
SERVED = sorted(p for p in PORTAL.glob("*.html") if p.name not in NOT_SERVED)


@pytest.mark.parametrize("template", SERVED, ids=lambda p: p.name)
def test_a_template_holds_nothing_the_policy_blocks(template):
    text = template.read_text()
    found = [
        f"{what} at line {text.count(chr(10), 0, match.start()) + 1}: {match.group(0)[:60]}"
        for what, pattern in BLOCKED.items()
        for match in pattern.finditer(text)
    ]
    assert found == []


def test_the_patterns_find_what_they_look_for():
    for sample, what in [
        ("<script>alert(1)</script>", "inline script"),
        ('<select name="d" onchange="this.form.submit()">', "event handler attribute"),
        ('<span style="width: 4%">', "style attribute"),
        ("<style>p {}</style>", "style element"),
    ]:
        assert BLOCKED[what].search(sample), what
    assert not BLOCKED["inline script"].search('<script src="/static/portal/portal.js"></script>')
    assert not BLOCKED["event handler attribute"].search('<div data-confirm="Delete?">')
