"""A batch start reaches the broker as one message carrying its new runs (the workers'
``runs_queued`` receiver, after the commit); a worker fans it out into one start_run message
per run. A run the batch only repeated is not sent again."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from ledger import api
from runs.operations import tasks

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not settings.CELERY_BROKER_URL.startswith("filesystem://"),
        reason="reads the broker's files",
    ),
]


def files() -> set[Path]:
    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_out"])
    return set(folder.glob(f"*.{settings.CELERY_TASK_DEFAULT_QUEUE}.msg"))


def waiting(task: str, *, before: set[Path]) -> list[tuple[Path, Any]]:
    """(file, first argument) of each ``task`` message put on the filesystem broker since
    ``before`` (the files there then: other tests' messages are never consumed here)."""
    found = []
    for path in sorted(files() - before):
        message = json.loads(path.read_text())
        if message["headers"]["task"] == task:
            args, _, _ = json.loads(base64.b64decode(message["body"]))
            found.append((path, args[0]))
    return found


def test_a_batch_is_one_message_that_a_worker_fans_out_into_one_start_per_run() -> None:
    before = files()
    earlier = api.start_run("refund", {"invoice_id": "inv_0"}, idempotency_key="pub-0")
    handles = api.start_runs(
        [{"agent": "refund", "inputs": {"invoice_id": f"inv_{i}"}, "idempotency_key": f"pub-{i}"}
         for i in range(6)]
    )  # fmt: skip
    made = [h.run_id for h in handles if h.created]
    assert len(made) == 5 and earlier.run_id not in made

    batches = [ids for _, ids in waiting("runledger.start_runs", before=before)]
    assert batches == [made]  # one message, the new runs in order
    starts = {run_id for _, run_id in waiting("runledger.start_run", before=before)}
    assert not starts & set(made)  # not one message per run from the request

    assert tasks.start_runs.apply(args=(made,)).get() == 5  # what the worker does with it
    starts = [run_id for _, run_id in waiting("runledger.start_run", before=before)]
    assert sorted(r for r in starts if r in set(made)) == sorted(made)
    assert starts.count(earlier.run_id) == 1  # its own start's message, not a second


def test_a_fan_out_message_that_is_not_a_list_of_run_ids_sends_nothing() -> None:
    assert tasks.start_runs.apply(args=("run_x",)).get() == 0
    assert tasks.start_runs.apply(args=([1, 2],)).get() == 0
