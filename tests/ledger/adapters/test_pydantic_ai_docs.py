"""The example that opens docs/authors/pydantic-ai.md, executed as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from ledger import registry, transitions
from ledger.models import Step

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = Path(__file__).resolve().parents[3] / "docs" / "authors" / "pydantic-ai.md"


def test_the_pages_opening_example_runs_and_refunds_once(execute: Any) -> None:
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert code is not None
    module = types.ModuleType("docs_pydantic_ai")  # a module, as the author's would be
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    exec(compile(code.group(1), str(PAGE), "exec"), namespace)
    try:
        run = transitions.run_start(agent="refund_desk", inputs={"message": "Refund ord_7"})
        outcome = execute(run.run_id)
        assert outcome.status == "succeeded", outcome
        assert outcome.result == {"text": "Refunded order ord_7."}
        steps = dict(Step.objects.filter(run_id=run.run_id).values_list("step_id", "kind"))
        assert steps == {
            "agent.turn.1": "model",
            "agent.turn.1.tools.0.lookup_order": "read",
            "agent.turn.2": "model",
            "agent.turn.2.tools.0.refund": "effect",
            "agent.turn.3": "model",
        }
        assert namespace["REFUNDS"] == {f"{run.run_id}:agent.turn.2.tools.0.refund": 4200}
        # The agent as written: its own tools, its deps, the effect named in run_agent.
        assert [t.name for t in namespace["desk"].toolsets[0].tools.values()] == [
            "lookup_order",
            "refund",
        ]
    finally:
        registry.unregister_agent("refund_desk")
        sys.modules.pop(module.__name__, None)
