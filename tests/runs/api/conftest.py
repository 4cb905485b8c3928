from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from harness.unannounced import start_unannounced
from ledger.models import Run
from runs.api import tokens
from runs.dashboard.roles import user_set_role


@dataclass
class Caller:
    """A test client sending one token."""

    client: Client
    secret: str

    def get(self, path: str, **kw: Any) -> Any:
        return self.client.get(path, HTTP_AUTHORIZATION=f"Bearer {self.secret}", **kw)

    def post(self, path: str, body: Any = None, *, raw: bytes | None = None, **kw: Any) -> Any:
        import json

        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(
            path,
            data=data,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.secret}",
            **kw,
        )


@pytest.fixture
def caller(client: Client, django_user_model: Any) -> Callable[..., Caller]:
    """``caller("operator")``: a client with a new service token of that role;
    ``caller("approver", user="bob")``: a person's token (the user is made an approver)."""

    from tests.support.dashboard_runs import restore_roles

    restore_roles()

    def make(role: str, *, user: str | None = None, name: str | None = None) -> Caller:
        person = None
        if user is not None:
            person = User.objects.filter(username=user).first() or (
                django_user_model.objects.create_user(username=user)
            )
            user_set_role(user=person, role=role)
        made = tokens.token_create(name=name or f"{role}-{user or 'svc'}", role=role, user=person)
        return Caller(client=client, secret=made.secret)

    return make


@pytest.fixture
def blocked(execute: Callable[..., Any], crash_at: Callable[..., None]) -> Callable[..., Run]:
    """A refund whose notification effect was interrupted: it needs a person (reconciliation)."""

    def make() -> Run:
        run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
        crash_at("notify.after_effect")
        execute(run.run_id, crash_expected=True)
        outcome = execute(run.run_id, worker="worker-2")
        assert (outcome.status, outcome.reason) == ("needs_attention", "reconciliation"), outcome
        run.refresh_from_db()
        return run

    return make
