"""``RunledgerSaver``: LangGraph's ``BaseCheckpointSaver`` on runledger's database.

The storage is the shape of LangGraph's own PostgreSQL saver: a row per checkpoint (the
checkpoint without its channel values, its metadata as JSON, its parent), a row per channel
value per version (``GraphBlob``: an unchanged channel is not stored again), and a row per
pending write of a task (``GraphWrite``). Values are LangGraph's serializer's typed bytes. Every
write goes through ``ledger.transitions.checkpoints``; a saver bound to a run (``fence=``) writes
only while the execution's lease holds, so a worker that lost its run writes no checkpoint.

Sync and async: the async methods run the same database work off the event loop, on the
ledger's pool of threads that give their connection back (``ledger.engine.aio.ledger_phase``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)

from ledger.transitions import checkpoints as store
from ledger.transitions.checkpoints import Blob, Fence, Write


def _jsonable(value: Any) -> Any:
    """Metadata as JSON (what LangGraph's PostgreSQL saver stores too)."""
    return json.loads(json.dumps(value, default=str))


class RunledgerSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints, their channel values and pending writes in runledger's database.

    ``RunledgerSaver()`` is a checkpointer for any graph (``builder.compile(checkpointer=
    RunledgerSaver())``); ``run_graph`` gives the graph one bound to the run (``fence=``), so
    the run page lists its checkpoints."""

    def __init__(self, *, fence: Fence | None = None, serde: Any = None) -> None:
        super().__init__(serde=serde)
        self.fence = fence

    # --- writes ---------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        copy = checkpoint.copy()
        values: dict[str, Any] = copy.pop("channel_values", {})  # type: ignore[misc]
        blobs = []
        for channel, version in new_versions.items():
            kind, data = (
                self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
            )
            blobs.append(Blob(channel, str(version), kind, data))
        kind, data = self.serde.dumps_typed(copy)
        store.checkpoint_put(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=configurable.get("checkpoint_id"),
            type=kind,
            data=data,
            metadata=_jsonable(get_serializable_checkpoint_metadata(config, metadata)),
            blobs=blobs,
            fence=self.fence,
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        rows = []
        for idx, (channel, value) in enumerate(writes):
            kind, data = self.serde.dumps_typed(value)
            rows.append(Write(WRITES_IDX_MAP.get(channel, idx), channel, kind, data))
        store.checkpoint_put_writes(
            thread_id=str(configurable["thread_id"]),
            checkpoint_ns=configurable.get("checkpoint_ns", ""),
            checkpoint_id=configurable["checkpoint_id"],
            task_id=task_id,
            task_path=task_path,
            writes=rows,
            fence=self.fence,
        )

    def delete_thread(self, thread_id: str) -> None:
        store.checkpoint_delete_thread(thread_id=str(thread_id), fence=self.fence)

    # --- reads ----------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        from ledger.models import GraphCheckpoint

        configurable = config["configurable"]
        rows = GraphCheckpoint.objects.filter(
            thread_id=str(configurable["thread_id"]),
            checkpoint_ns=configurable.get("checkpoint_ns", ""),
        )
        if checkpoint_id := get_checkpoint_id(config):
            rows = rows.filter(checkpoint_id=checkpoint_id)
        row = rows.order_by("-checkpoint_id").first()
        return None if row is None else self._tuple(row)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        from ledger.models import GraphCheckpoint

        rows = GraphCheckpoint.objects.all()
        if config is not None:
            configurable = config["configurable"]
            rows = rows.filter(thread_id=str(configurable["thread_id"]))
            if configurable.get("checkpoint_ns") is not None:
                rows = rows.filter(checkpoint_ns=configurable["checkpoint_ns"])
            if checkpoint_id := get_checkpoint_id(config):
                rows = rows.filter(checkpoint_id=checkpoint_id)
        if before is not None and (before_id := get_checkpoint_id(before)):
            rows = rows.filter(checkpoint_id__lt=before_id)
        wanted = _jsonable(filter or {})
        found = 0
        for row in rows.order_by("thread_id", "checkpoint_ns", "-checkpoint_id").iterator():
            if limit is not None and found >= limit:
                return
            if any(row.metadata.get(k) != v for k, v in wanted.items()):
                continue
            found += 1
            yield self._tuple(row)

    def _tuple(self, row: Any) -> CheckpointTuple:
        from ledger.models import GraphBlob, GraphWrite

        checkpoint = self.serde.loads_typed((row.type, bytes(row.checkpoint)))
        versions = checkpoint.get("channel_versions", {})
        values: dict[str, Any] = {}
        if versions:
            blobs = GraphBlob.objects.filter(
                thread_id=row.thread_id,
                checkpoint_ns=row.checkpoint_ns,
                channel__in=list(versions),
            )
            for blob in blobs:
                if str(versions.get(blob.channel)) == blob.version and blob.type != "empty":
                    values[blob.channel] = self.serde.loads_typed((blob.type, bytes(blob.blob)))
        pending = GraphWrite.objects.filter(
            thread_id=row.thread_id,
            checkpoint_ns=row.checkpoint_ns,
            checkpoint_id=row.checkpoint_id,
        ).order_by("task_path", "task_id", "idx")
        address = {"thread_id": row.thread_id, "checkpoint_ns": row.checkpoint_ns}
        return CheckpointTuple(
            config={"configurable": {**address, "checkpoint_id": row.checkpoint_id}},
            checkpoint=cast(Checkpoint, {**checkpoint, "channel_values": values}),
            metadata=row.metadata,
            parent_config=(
                {"configurable": {**address, "checkpoint_id": row.parent_checkpoint_id}}
                if row.parent_checkpoint_id
                else None
            ),
            pending_writes=[
                (w.task_id, w.channel, self.serde.loads_typed((w.type, bytes(w.blob))))
                for w in pending
            ],
        )

    # --- async: the same work off the loop ------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await _off_loop(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await _off_loop(self.put_writes, config, writes, task_id, task_path)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await _off_loop(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        def listed() -> list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for item in await _off_loop(listed):
            yield item

    async def adelete_thread(self, thread_id: str) -> None:
        await _off_loop(self.delete_thread, thread_id)


async def _off_loop(fn: Any, *args: Any) -> Any:
    from ledger.engine import aio

    return await aio.ledger_phase(fn, *args)
