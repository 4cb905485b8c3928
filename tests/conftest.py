from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings

# Browser tests drive a live server from the test thread.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _plain_http() -> None:
    """The test client and the live server speak plain HTTP, as ``RUNLEDGER_PLAIN_HTTP=1``
    makes a process do. pytest-django reads the settings before this file is imported, so the
    environment variable cannot be set here; the production defaults themselves are tested
    in subprocesses (tests/runs/settings/test_deploy_settings.py)."""
    from django.conf import settings

    for name in ("SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE"):
        setattr(settings, name, False)
    settings.SECURE_HSTS_SECONDS = 0


_plain_http()


class Crash(BaseException):
    """Stands for the process dying at a crash point: nothing in the engine catches it."""


@dataclass
class FakeClock:
    now: datetime = field(default_factory=lambda: datetime(2026, 11, 30, 12, 0, tzinfo=UTC))
    #: Every wait the engine slept on this clock (a retry's back-off), in order.
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def sleep(self, seconds: float) -> None:
        """The engine's sleep on this clock: time moves, nothing waits."""
        self.slept.append(seconds)
        self.advance(seconds)


@pytest.hookimpl(trylast=True)  # after pytest-django's order (db, transactional, no db)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In a pytest-xdist process (``make test``: ``--dist loadfile --no-loadscope-reorder``),
    the files that hold a ``slow`` test come first: xdist hands files out in this order, so
    the long ones start early and the last ones handed out are short, and both processes end
    together. (xdist's own order, most tests first, left the one-test files — the soak, the
    kill test, the upgrade — for last, one process running them while the other idled.) A
    file's tests keep their order; a run in one process keeps pytest-django's order.

    Browser files come **last**, though slow: Playwright's sync API (pytest-playwright's
    session-wide browser) leaves its event loop marked running in the process's main thread
    from the first browser test on, and every later ``asyncio.run`` in that process fails
    ("cannot be called from a running event loop"): the async clients' and agents' tests must
    run before it starts."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    browser = {item.path for item in items if item.get_closest_marker("browser")}

    def rank(item: pytest.Item) -> int:
        if item.path in browser:
            return 2
        return 0 if item.path in slow else 1

    items.sort(key=rank)  # stable: only whole files move


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def crash_at() -> Iterator[Callable[[str], None]]:
    """Arm a named crash point (harness.faults) to kill the step once."""
    from harness import faults

    def arm(point: str, times: int = 1) -> None:
        left = [times]

        def hook() -> None:
            if left[0] > 0:
                left[0] -= 1
                raise Crash(point)

        faults.set_hook(point, hook)

    yield arm
    faults.clear_hooks()


@pytest.fixture
def execute(clock: FakeClock) -> Callable[..., Any]:
    """Run one execution of a run as a worker would (no heartbeat thread; the clock is fake)."""

    def run(run_id: str, *, worker: str = "worker-1", crash_expected: bool = False) -> Any:
        from ledger.processes.execute import run_execute

        if crash_expected:
            with pytest.raises(Crash):
                run_execute(
                    run_id=run_id, worker=worker, clock=clock, heartbeat=False, sleep=clock.sleep
                )
            # The dead worker's lease must expire before anyone may take the run over, and its
            # effect window (the margin past it) end before its effects are touched.

            clock.advance(
                settings.RUNLEDGER_LEASE_SECONDS + settings.RUNLEDGER_EFFECT_MARGIN_SECONDS + 1
            )
            return None
        return run_execute(
            run_id=run_id, worker=worker, clock=clock, heartbeat=False, sleep=clock.sleep
        )

    return run


# --- browser tests (the dashboard) ---------------------------------------------------------
# Playwright drives Debian's Chromium package, never a downloaded browser. pytest-playwright has
# no option for the executable, so its launch-arguments fixture is overridden here.
CHROMIUM = os.environ.get("RUNLEDGER_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"browser tests need Chromium at {CHROMIUM}: `apt-get install -y chromium` "
            "(or deselect them with -m 'not browser')"
        )
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    }


#: How long a browser test's actions and assertions wait for their condition. Playwright's
#: defaults (5 s for an assertion) race a loaded machine; a condition that holds passes at once.
BROWSER_WAIT_MS = 60_000


@pytest.fixture
def page(page: Any) -> Any:
    """pytest-playwright's page, waiting up to ``BROWSER_WAIT_MS`` for every condition."""
    from playwright.sync_api import expect

    page.set_default_timeout(BROWSER_WAIT_MS)
    page.set_default_navigation_timeout(BROWSER_WAIT_MS)
    expect.set_options(timeout=BROWSER_WAIT_MS)
    return page


@pytest.fixture(scope="session", autouse=True)
def _ledger_owner_guard() -> None:
    """Every SQL write to a run or a step row in this process must come from the owner."""
    from tests.support import ownership

    ownership.install_runtime_guard()


@pytest.fixture(autouse=True)
def _no_real_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example agents call a real model when a key is set; tests never do by accident."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("RUNLEDGER_EXAMPLE_MODEL", raising=False)


@pytest.fixture(autouse=True)
def _no_wait_listener_left() -> Iterator[None]:
    """A test that waited on a run (``ledger.waiting``) leaves no LISTEN connection behind: the
    test database is dropped at the end of the session."""
    yield
    from ledger import waiting

    waiting.stop_listening()
