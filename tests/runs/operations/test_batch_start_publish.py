"""A batch start reaches the broker: one start_run message per new run, published together after
the commit (the workers' ``runs_queued`` receiver), none for a run the batch only repeated."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from django.conf import settings

from ledger import api

pytestmark = pytest.mark.django_db(transaction=True)


def start_messages(run_ids: set[str]) -> list[str]:
    """The run ids of the start_run messages waiting on the filesystem broker for ``run_ids``."""
    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_out"])
    found = []
    for path in folder.glob(f"*.{settings.CELERY_TASK_DEFAULT_QUEUE}.msg"):
        message = json.loads(path.read_text())
        if message["headers"]["task"] != "runledger.start_run":
            continue
        args, _, _ = json.loads(base64.b64decode(message["body"]))
        if args[0] in run_ids:
            found.append(args[0])
    return found


@pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith("filesystem://"), reason="reads the broker's files"
)
def test_each_new_run_of_a_batch_is_one_start_message_on_the_broker() -> None:
    earlier = api.start_run("refund", {"invoice_id": "inv_0"}, idempotency_key="pub-0")
    handles = api.start_runs(
        [{"agent": "refund", "inputs": {"invoice_id": f"inv_{i}"}, "idempotency_key": f"pub-{i}"}
         for i in range(6)]
    )  # fmt: skip
    made = {h.run_id for h in handles if h.created}
    assert len(made) == 5 and earlier.run_id not in made
    assert sorted(start_messages(made)) == sorted(made)
    assert start_messages({earlier.run_id}) == [earlier.run_id]  # its own start's, not again
