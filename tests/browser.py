"""Headless Chromium (Debian's) driven by Playwright: the `page` and `artifacts` fixtures of every
browser test (registered in tests/conftest.py)."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=FLAGS, headless=True
        )
        page = context.new_page()
        page.set_default_timeout(15_000)
        yield page
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def artifacts() -> Path:
    """Where browser tests leave screenshots for people to look at: $TEST_ARTIFACTS_DIR, else
    .data/artifacts/ in the checkout (ignored by git, kept after the run)."""
    default = Path(__file__).resolve().parents[1] / ".data" / "artifacts"
    path = Path(os.environ.get("TEST_ARTIFACTS_DIR") or default)
    path.mkdir(parents=True, exist_ok=True)
    return path
