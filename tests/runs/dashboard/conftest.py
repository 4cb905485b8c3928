"""What the dashboard's test files share: the worker execution carrying its clock, and a clean
slate for a test that signs people in (``dashboard_ready``, used by each file's ``_clean``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.dashboard_runs import restore_roles, rewind


@pytest.fixture
def execute(execute: Any, clock: Any) -> Any:
    """conftest's worker execution, carrying its clock for the run builders
    (``tests.support.dashboard_runs``)."""
    execute.clock = clock
    return execute


@pytest.fixture
def dashboard_ready(clock: Any, settings: Any) -> None:
    """Fast password hashing, the roles' groups as the migration made them, and the fake clock
    in the recent past (so ages on the pages read as real ones)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    restore_roles()
    rewind(clock)


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A real OpenID Connect provider on loopback (``tests.support.oidc``), one per session."""
    from tests.support.oidc import start_provider

    provider = start_provider(tmp_path_factory.mktemp("oidc-provider"))
    yield provider
    provider.stop()
