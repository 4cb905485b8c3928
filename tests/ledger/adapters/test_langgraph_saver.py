"""``RunledgerSaver`` against LangGraph's own conformance suite for checkpointers
(``langgraph-checkpoint-conformance``: put, put_writes, get_tuple, list, delete_thread, sync
and async), and its fence: a saver bound to a run writes nothing once the lease is gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate

from ledger import transitions
from ledger.adapters.langgraph_saver import RunledgerSaver
from ledger.errors import LeaseLost
from ledger.models import GraphCheckpoint
from ledger.transitions.checkpoints import Fence

pytestmark = pytest.mark.django_db(transaction=True)


@checkpointer_test(name="RunledgerSaver")
async def runledger_saver() -> AsyncIterator[RunledgerSaver]:
    yield RunledgerSaver()


def test_runledger_saver_passes_langgraphs_conformance_suite(capsys: Any) -> None:
    report = asyncio.run(validate(runledger_saver))
    report.print_report()
    assert report.passed_all_base(), capsys.readouterr().out


def test_the_sync_methods_round_trip_a_checkpoint_and_its_writes() -> None:
    saver = RunledgerSaver()
    config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": ["hello"]}
    checkpoint["channel_versions"] = {"messages": "1"}
    saved = saver.put(config, checkpoint, {"source": "input", "step": -1}, {"messages": "1"})
    saver.put_writes(saved, [("messages", "next")], task_id="task-1")
    got = saver.get_tuple({"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}})
    assert got is not None
    assert got.checkpoint["channel_values"] == {"messages": ["hello"]}
    assert got.metadata == {"source": "input", "step": -1}
    assert got.pending_writes == [("task-1", "messages", "next")]
    assert [t.config for t in saver.list(None, filter={"source": "input"})] == [saved]
    saver.delete_thread("t-1")
    assert saver.get_tuple(config) is None and not GraphCheckpoint.objects.exists()


def test_a_saver_bound_to_a_run_writes_nothing_without_the_runs_lease() -> None:
    run_id = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"}).run_id
    saver = RunledgerSaver(fence=Fence(run_id, "not-the-lease"))
    config = {"configurable": {"thread_id": f"{run_id}/graph", "checkpoint_ns": ""}}
    with pytest.raises(LeaseLost):
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    assert not GraphCheckpoint.objects.exists()
