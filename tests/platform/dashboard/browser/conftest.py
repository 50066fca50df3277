"""Headless Chromium (Debian's package) driven by Playwright, against pytest-django's live server.

No browser is downloaded: Playwright launches /usr/bin/chromium. `.ci/run` installs it; in CI a
missing browser fails the suite instead of skipping it. Every page visit goes through `visit`,
which asserts no console error, no uncaught exception, no failed request and no horizontal
overflow, and saves a full-page screenshot under var/screenshots/ (git-ignored).
"""

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

CHROMIUM = os.environ.get("DRIFTWATCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"
WIDTHS = {"desktop": 1440, "phone": 390}

# Playwright's sync API runs an event loop in this thread; Django's ORM guard would then refuse
# the test's own (synchronous) database calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _browser_missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is not installed (apt-get install chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements.txt)"
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    missing = _browser_missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run in CI: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@dataclass
class Tab:
    """One page in a fresh browser context, recording every problem the page reports."""

    page: Any
    base_url: str
    width: str
    test_name: str
    problems: list[str] = field(default_factory=list)

    def visit(self, path: str, shot: str | None = None) -> Any:
        self.problems.clear()
        response = self.page.goto(self.base_url + path, wait_until="networkidle")
        assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
        self.settle(path, shot)
        return self.page

    def settle(self, where: str, shot: str | None = None) -> None:
        """After a navigation or a click: problems, overflow and a screenshot."""
        self.page.wait_for_load_state("networkidle")
        self.screenshot(shot or where)
        overflow = self.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{where} overflows the {self.width} viewport by {overflow}px: {self.widest()}"
        assert not self.problems, f"{where}: {self.problems}"

    def widest(self) -> str:
        """The outermost element sticking out of the viewport, to say what overflowed."""
        return str(
            self.page.evaluate(
                """() => { for (const e of document.querySelectorAll('body *')) {
                     const r = e.getBoundingClientRect();
                     if (r.right > window.innerWidth + 0.5) return e.outerHTML.slice(0, 120); }
                   return 'none'; }"""
            )
        )

    def screenshot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{self.test_name}-{name}-{self.width}").strip("-")
        self.page.screenshot(path=str(SCREENSHOTS / f"{slug}.png"), full_page=True)


def _watch(tab: Tab) -> None:
    page = tab.page
    page.on(
        "console",
        lambda m: (
            tab.problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None
        ),
    )
    page.on("pageerror", lambda e: tab.problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: tab.problems.append(f"failed request {r.url}: {r.failure}"))
    page.on(
        "response",
        lambda r: tab.problems.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None,
    )


@pytest.fixture(params=list(WIDTHS))
def tab_for(
    request: pytest.FixtureRequest, browser: Any, live_server: Any
) -> Iterator[Callable[[str, str], Tab]]:
    """tab_for(username, password) → a Tab logged in through the login form, at each width."""
    width = request.param
    contexts: list[Any] = []

    def open_tab(username: str, password: str) -> Tab:
        context = browser.new_context(viewport={"width": WIDTHS[width], "height": 900})
        contexts.append(context)
        tab = Tab(context.new_page(), live_server.url, width, request.node.originalname)
        _watch(tab)
        tab.visit("/login/", "login")
        tab.page.fill("#id_username", username)
        tab.page.fill("#id_password", password)
        tab.page.click("button.primary")
        tab.settle("after login")
        assert "/login/" not in tab.page.url, f"login failed: {tab.page.url}"
        return tab

    yield open_tab
    for context in contexts:
        context.close()
