"""Framework adapters: agents written with an agent framework, run durably on the ledger.

Each adapter module (``ledger.adapters.pydantic_ai``, ``ledger.adapters.openai_agents``,
``ledger.adapters.claude_agent_sdk``,
``ledger.adapters.langgraph``) imports its framework only when used, and registers a
transcript renderer here: ``transcript(run_id) -> list[dict]`` giving what was said in a run
(each entry ``{"role", "text", "time", "step_id"}``, in order), built from the ledger alone.
The run page shows the entries of every registered renderer beside the step chain.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any

#: One entry of a transcript: ``role`` (system, user, assistant, tool), ``text``, ``time``
#: (ISO text or ""), ``step_id`` (the ledger step that said or did it).
Entry = dict[str, Any]
Renderer = Callable[[str], list[Entry]]

_renderers: dict[str, Renderer] = {}
#: Each known module's import, tried once a process: True when it imported, False when not.
_imported: dict[str, bool] = {}
_importing = threading.Lock()
log = logging.getLogger(__name__)

#: The adapter modules the run page asks for a transcript (imported lazily, each may be absent).
KNOWN = (
    "ledger.adapters.pydantic_ai",
    "ledger.adapters.openai_agents",
    "ledger.adapters.claude_agent_sdk",
    "ledger.adapters.langgraph",
)


def register_transcript(framework: str, renderer: Renderer) -> None:
    """Register ``renderer`` as the transcript of the runs ``framework`` drove."""
    _renderers[framework] = renderer


def renderers() -> dict[str, Renderer]:
    """The registered renderers, after trying each ``KNOWN`` module's import once a process.

    A module that fails is left out and not tried again: an absent extra (``ImportError``)
    silently, anything else (``AgentDefinitionError`` for an SDK outside the pinned range, an
    error in the SDK's own import) with one warning. Never raises: the run page shows the other
    frameworks' transcripts."""
    for module in KNOWN:
        if module not in _imported:
            _import_once(module)
    return dict(_renderers)


def _import_once(module: str) -> None:
    with _importing:
        if module in _imported:
            return
        try:
            importlib.import_module(module)
        except ImportError:
            _imported[module] = False
        except Exception:
            _imported[module] = False
            log.warning("%s failed to import; its transcripts are not shown", module, exc_info=True)
        else:
            _imported[module] = True


def transcripts(run_id: str) -> dict[str, list[Entry]]:
    """Every registered framework's transcript of ``run_id`` that has entries."""
    found = {}
    for framework, renderer in sorted(renderers().items()):
        entries = renderer(run_id)
        if entries:
            found[framework] = entries
    return found
