"""LangGraph checkpoints kept beside the run's ledger (``ledger.adapters.langgraph``).

``RunledgerSaver`` — LangGraph's ``BaseCheckpointSaver`` on runledger's database — writes only
through these functions: a checkpoint with its new channel values, a task's pending writes, and a
thread deleted. Each is one transaction. A saver bound to a run (the one ``run_graph`` gives the
graph) passes the run's id and the execution's lease token: the run row is taken ``FOR SHARE``
with that token first, as a step write is, so a worker that lost its lease (taken over,
cancelled) writes no checkpoint and gets ``LeaseLost``. A saver used outside a run passes
neither and writes unfenced, as any LangGraph saver does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ledger.errors import LeaseLost
from ledger.models import GraphBlob, GraphCheckpoint, GraphWrite

Clock = Callable[[], datetime]

_FENCE = "SELECT 1 FROM ledger_run WHERE run_id = %s AND lease_token = %s AND status = 'running'"


@dataclass(frozen=True)
class Fence:
    """The run a saver writes for and the execution's lease token."""

    run_id: str
    token: str


@dataclass(frozen=True)
class Blob:
    channel: str
    version: str
    type: str
    data: bytes


@dataclass(frozen=True)
class Write:
    idx: int
    channel: str
    type: str
    data: bytes


def _check_fence(fence: Fence | None) -> None:
    if fence is None:
        return
    sql = _FENCE + (" FOR SHARE" if connection.vendor == "postgresql" else "")
    with connection.cursor() as cur:
        cur.execute(sql, [fence.run_id, fence.token])
        if cur.fetchone() is None:
            raise LeaseLost(fence.run_id)


def checkpoint_put(
    *,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    parent_checkpoint_id: str | None,
    type: str,
    data: bytes,
    metadata: dict[str, Any],
    blobs: Sequence[Blob],
    fence: Fence | None = None,
    clock: Clock = timezone.now,
) -> None:
    """Store one checkpoint and the channel values new in it, in one transaction. Putting the
    same checkpoint id again replaces it (LangGraph's savers do); a channel version already
    stored is kept (its value cannot differ)."""
    row = GraphCheckpoint(
        run_id=fence.run_id if fence else None,
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=parent_checkpoint_id or "",
        type=type,
        checkpoint=data,
        metadata=metadata,
        created_at=clock(),
    )
    with transaction.atomic():
        _check_fence(fence)
        GraphBlob.objects.bulk_create(
            [
                GraphBlob(
                    thread_id=thread_id,
                    checkpoint_ns=checkpoint_ns,
                    channel=b.channel,
                    version=b.version,
                    type=b.type,
                    blob=b.data,
                )
                for b in blobs
            ],
            ignore_conflicts=True,
        )
        GraphCheckpoint.objects.bulk_create(
            [row],
            update_conflicts=True,
            unique_fields=["thread_id", "checkpoint_ns", "checkpoint_id"],
            update_fields=["parent_checkpoint_id", "type", "checkpoint", "metadata", "run"],
        )


def checkpoint_put_writes(
    *,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: Sequence[Write],
    fence: Fence | None = None,
) -> None:
    """Store a task's pending writes against a checkpoint, once: a regular write (``idx`` >= 0)
    already stored is kept (the task ran again after a crash and wrote the same); a special one
    (an error, an interrupt, a resume value: ``idx`` < 0) replaces what was stored, as
    LangGraph's own savers do."""

    def rows(chosen: Sequence[Write]) -> list[GraphWrite]:
        return [
            GraphWrite(
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=checkpoint_id,
                task_id=task_id,
                task_path=task_path,
                idx=w.idx,
                channel=w.channel,
                type=w.type,
                blob=w.data,
            )
            for w in chosen
        ]

    regular = [w for w in writes if w.idx >= 0]
    special = [w for w in writes if w.idx < 0]
    with transaction.atomic():
        _check_fence(fence)
        if regular:
            GraphWrite.objects.bulk_create(rows(regular), ignore_conflicts=True)
        if special:
            GraphWrite.objects.bulk_create(
                rows(special),
                update_conflicts=True,
                unique_fields=["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                update_fields=["channel", "type", "blob", "task_path"],
            )


def checkpoint_delete_thread(*, thread_id: str, fence: Fence | None = None) -> int:
    """Delete every checkpoint, channel value and pending write of ``thread_id``; how many
    checkpoints went."""
    with transaction.atomic():
        _check_fence(fence)
        GraphWrite.objects.filter(thread_id=thread_id).delete()
        GraphBlob.objects.filter(thread_id=thread_id).delete()
        deleted, _ = GraphCheckpoint.objects.filter(thread_id=thread_id).delete()
    return deleted
