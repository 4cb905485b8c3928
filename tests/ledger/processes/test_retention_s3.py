"""Retention to an S3-compatible bucket (django-storages on boto3), against a real S3 server on
loopback (moto's server mode, a separate process): prune here, read the archive back from a
process with another var dir and no local archive at all, as another machine would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from harness.cluster import database_url
from harness.servers import free_port, wait_for_port
from ledger.models import RunArchive, Step
from ledger.processes import retention
from tests.support.retention import finished_survey

boto3 = pytest.importorskip("boto3")
pytest.importorskip("storages")
pytest.importorskip("moto")

pytestmark = pytest.mark.django_db(transaction=True)
BUCKET = "runledger-archive-test"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture
def s3_endpoint(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = open(tmp_path / "moto.log", "wb")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for_port(port, timeout=60)
        _client(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, **_boto_credentials())


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


def _s3_storages(endpoint: str) -> dict[str, Any]:
    return {
        **settings.STORAGES,
        retention.ARCHIVE_STORAGE: {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "location": "prod/archive",
                "endpoint_url": endpoint,
                "file_overwrite": True,
                "access_key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "secret_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
            },
        },
    }


@pytest.fixture
def execute(execute, clock):
    execute.clock = clock
    return execute


def test_prune_archives_to_a_bucket_and_another_machine_reads_it_back(
    execute, clock, s3_endpoint, tmp_path, capsys
) -> None:
    runs = [finished_survey(execute, clock, days_ago=40 - i, records=2 + i) for i in range(3)]
    steps = {r.run_id: Step.objects.filter(run=r).count() for r in runs}

    with override_settings(STORAGES=_s3_storages(s3_endpoint)):
        call_command("prune_runs", "--finished-before", "30d", "--runs-per-file", "2")
    out = capsys.readouterr().out
    assert "pruned 3 runs" in out and f"s3://{BUCKET}/prod/archive in 2 files" in out

    assert not Step.objects.filter(run__in=runs).exists()
    listed = _client(s3_endpoint).list_objects_v2(Bucket=BUCKET, Prefix="prod/archive/")
    keys = sorted(o["Key"] for o in listed["Contents"])
    locations = {a.run_id: a.location for a in RunArchive.objects.all()}
    assert keys == sorted(f"prod/archive/{name}" for name in set(locations.values()))
    assert {a.run_id: a.steps for a in RunArchive.objects.all()} == steps
    assert not (Path(settings.RUNLEDGER_ARCHIVE_DIR)).joinpath(locations[runs[0].run_id]).exists()

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RUNLEDGER_", "AWS_"))}
    environ.update(
        CREDENTIALS,
        DATABASE_URL=database_url(),
        RUNLEDGER_VAR_DIR=str(tmp_path / "another-machine"),
        RUNLEDGER_ARCHIVE_S3_BUCKET=BUCKET,
        RUNLEDGER_ARCHIVE_S3_PREFIX="prod/archive",
        RUNLEDGER_ARCHIVE_S3_ENDPOINT_URL=s3_endpoint,
    )
    for run in runs:
        shown = subprocess.run(
            [sys.executable, "manage.py", "show_archive", run.run_id, "--json"],
            cwd=settings.BASE_DIR, env=environ, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0] == f"archive of run {run.run_id}: {steps[run.run_id]} steps"
        assert len(lines) == 1 + steps[run.run_id]
        assert all(f'"run_id": "{run.run_id}"' in line for line in lines[1:])
    assert not (tmp_path / "another-machine" / "archive").exists() or not any(
        (tmp_path / "another-machine" / "archive").iterdir()
    )
