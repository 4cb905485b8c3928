"""The API's root (``/api/v1/``) says which runledger answers."""

from __future__ import annotations

from typing import Any

import pytest

import ledger


@pytest.mark.django_db
def test_the_api_root_answers_runledgers_version(caller: Any) -> None:
    answer = caller("viewer").get("/api/v1/")
    assert answer.status_code == 200, answer.content
    assert answer.json()["version"] == ledger.__version__
    assert answer.json()["name"] == "runledger"


@pytest.mark.django_db
def test_the_api_root_needs_a_token(client: Any) -> None:
    answer = client.get("/api/v1/")
    assert answer.status_code == 401
