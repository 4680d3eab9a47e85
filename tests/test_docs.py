"""The documentation: the site under docs/ builds with MkDocs in strict mode (a link to a page or
heading that does not exist fails it), fetches nothing from elsewhere when read, and the
pointers into docs/ that people meet outside the site (README.md as the repository host shows
it, the Makefile, messages and comments in the code) lead to files that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# [text](target): the target up to a space or the closing parenthesis (no nested parentheses in
# this README's link targets).
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path into docs/ written as text: `docs/reference/mqtt.md`, see docs/rules.md, …
DOCS_PATH = re.compile(r"\bdocs/[\w./-]*\.md\b")


def _build(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)]
        + ["-d", str(tmp_path / "site")],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_site_builds_strict_without_dead_links(tmp_path):
    result = _build(tmp_path, ROOT / "mkdocs.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "site" / "reference" / "mqtt" / "index.html").is_file()
    # A pipe in a table's code is escaped for the repository host; the site shows it plain
    # (scripts/docs_hooks.py), in the same table row.
    commands = (tmp_path / "site" / "reference" / "command-line" / "index.html").read_text()
    assert (
        "<code>create_device TENANT NAME [--password SECRET] [--client-ids exact|any|PATTERN]"
        in commands
    )


def test_a_dead_link_or_anchor_fails_the_build(tmp_path):
    """The check above only means something if strict mode catches what it should: a copy of
    the docs with one link to a missing page, then one to a missing heading, must fail."""
    for bad in ("[gone](reference/no-such-page.md)", "[gone](reference/mqtt.md#no-such-heading)"):
        copy = tmp_path / bad.split("(")[1].replace("/", "_").replace("#", "_")
        shutil.copytree(ROOT / "docs", copy / "docs")
        shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
        index = copy / "docs" / "index.md"
        index.write_text(index.read_text() + f"\n{bad}\n")
        result = _build(copy, copy / "mkdocs.yml")
        assert result.returncode != 0, bad
        assert "no-such" in result.stdout + result.stderr, result.stdout + result.stderr


def test_the_site_fetches_nothing_from_other_hosts(tmp_path):
    """Readable offline, and no reader's browser is sent to a CDN: scripts, styles and images
    are the site's own (the built-in theme loads highlight.js from a CDN unless turned off)."""
    result = _build(tmp_path, ROOT / "mkdocs.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    fetched = re.compile(
        r"<(?:script|img)[^>]+src=\"(?:https?:)?//|<link[^>]+href=\"(?:https?:)?//"
    )
    for page in (tmp_path / "site").rglob("*.html"):
        match = fetched.search(page.read_text())
        assert match is None, f"{page.relative_to(tmp_path)}: {match.group(0) if match else ''}"


def _github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to -."""
    text = unicodedata.normalize("NFKC", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(markdown: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} +(.+?) *#*$", markdown.read_text(), flags=re.MULTILINE)
    return {_github_slug(heading) for heading in headings}


def test_readme_links_into_docs_resolve():
    """README.md is read on the repository host, outside the site: each of its relative links
    (to docs/ or elsewhere in the repository) names a file that exists, and an anchor into a
    Markdown file names one of its headings."""
    readme = ROOT / "README.md"
    targets = [t for t in MARKDOWN_LINK.findall(readme.read_text()) if "://" not in t]
    assert any(t.startswith("docs/") for t in targets), "README.md links to no page of docs/"
    for target in targets:
        if target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        file = (ROOT / path).resolve()
        assert file.exists(), f"README.md links to {target}: no such file"
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file), f"README.md links to {target}: no such heading"


def test_docs_paths_named_outside_the_site_exist():
    """`docs/….md` written as text (in the README, the Makefile, an error message or a comment)
    is where a person goes next: it must be there."""
    sources = [ROOT / "README.md", ROOT / "Makefile"]
    for package in ("common", "control_plane", "tenants", "data_plane", "spark", "bench"):
        sources += (ROOT / package).rglob("*.py")
        sources += (ROOT / package).rglob("*.md")
    missing = []
    for source in sources:
        for path in DOCS_PATH.findall(source.read_text(errors="replace")):
            if not (ROOT / path).is_file():
                missing.append(f"{source.relative_to(ROOT)}: {path}")
    assert not missing, "\n".join(missing)
