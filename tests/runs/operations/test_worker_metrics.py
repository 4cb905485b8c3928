"""A worker-only machine's counters reach Prometheus (``metrics_exporter``) and survive a restart
of the web on the same machine (finding 4 of issue 24: no scrape endpoint without a web, and the
systemd example's ``rm -rf`` of the metrics directory on web start wiped the worker's counters).
The shipped alerting rules pass ``promtool test rules`` and name only metrics a real scrape has.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cluster import database_url
from ledger.models import Run, Step
from tests.support.processes import (
    ROOT,
    Process,
    counter_total,
    deployment_env,
    free_port,
    get,
    gunicorn,
    json_lines,
    manage,
    redis_reachable,
    wait_for,
    worker,
)

TOKEN = "scrape-token-2"
ALERTS = ROOT / "docs" / "platform" / "alerts.yml"
STEPS = "runledger_steps_written_total"


def web_unit_metrics_steps(directory: Path) -> list[str]:
    """The systemd example's web start steps that touch the metrics directory, as shell lines
    for ``directory`` (docs/platform/index.md)."""
    page = (ROOT / "docs" / "platform" / "index.md").read_text()
    unit = page.split("runledger-web.service", 1)[1].split("```", 1)[0]
    return [
        line.split("=", 1)[1].strip().replace("/run/runledger/prometheus", str(directory))
        for line in unit.splitlines()
        if line.startswith("ExecStartPre=") and "prometheus" in line
    ]


def scrape(url: str) -> str:
    status, _, body = get(url, Authorization=f"Bearer {TOKEN}")
    assert status == 200, body
    return body.decode()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not redis_reachable(), reason="needs Redis on 127.0.0.1:6379")
def test_a_worker_machines_counters_are_scraped_and_survive_a_web_restart(tmp_path) -> None:
    metrics_dir = tmp_path / "prometheus"
    env = deployment_env(
        tmp_path,
        DATABASE_URL=database_url(),
        RUNLEDGER_METRICS_TOKEN=TOKEN,
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        WEB_CONCURRENCY="1",
    )
    metrics_dir.mkdir(mode=0o700)  # as the example's tmpfiles.d line makes it at boot
    exporter_port, web_port = free_port(), free_port()
    work = worker(env, tmp_path)
    web: Process | None = None
    exporter: Process | None = None
    try:
        started = manage(env, "start_run", "survey", "--inputs", '{"records": 3}')
        assert started.returncode == 0, started.stderr
        run_id = re.search(r"run_\w+", started.stdout).group(0)  # type: ignore[union-attr]
        assert wait_for(
            lambda: Run.objects.filter(pk=run_id, status="succeeded").exists(), timeout=120
        )
        rows = Step.objects.filter(run_id=run_id).count()
        assert rows >= 3

        for step in web_unit_metrics_steps(metrics_dir):  # what the example runs on web start
            subprocess.run(["/bin/sh", "-c", step], check=True)
        web = gunicorn(env, tmp_path, web_port)
        served = f"http://127.0.0.1:{web_port}/metrics"
        written = counter_total(scrape(served), STEPS)
        assert written >= rows  # the worker's counters, in the web's /metrics
        web.stop()
        for step in web_unit_metrics_steps(metrics_dir):
            subprocess.run(["/bin/sh", "-c", step], check=True)
        web = gunicorn(env, tmp_path, web_port)  # the web restarts; the worker keeps running
        after = scrape(served)
        assert counter_total(after, STEPS) == written
        missing = metric_families(ALERTS.read_text()) - metric_families(after) - declared()
        assert not missing, f"the alerting rules name metrics /metrics does not have: {missing}"

        # A machine with workers and no web: the exporter serves the same counters.
        command = [*manage_command(), "metrics_exporter", "--port", str(exporter_port)]
        exporter = Process("exporter", command, env, tmp_path)
        exporter.wait_for_output("metrics exporter listening")
        exported = f"http://127.0.0.1:{exporter_port}/metrics"
        assert get(exported)[0] == 403  # no token, no counters
        assert get(exported, Authorization="Bearer wrong")[0] == 403
        assert counter_total(scrape(exported), STEPS) == written
        assert "runledger_runs{" not in scrape(exported)  # the ledger's gauges are the web's
    finally:
        for process in (web, exporter, work):
            if process is not None:
                process.stop()
    assert exporter is not None and json_lines(exporter.output())  # its lines are JSON too


def metric_families(text: str) -> set[str]:
    """The runledger metric families named in ``text`` (a scrape, or rule expressions)."""
    names = re.findall(r"\brunledger_[a-z_]+", text)
    return {re.sub(r"_(total|bucket|count|sum|created)$", "", name) for name in names}


def declared() -> set[str]:
    """The counters and histograms the code declares (a counter nobody incremented yet, such as
    the notification deliveries here, has no sample in a multiprocess scrape)."""
    from runs.operations.metrics import COUNTED

    return {metric._name for metric in COUNTED}


def manage_command() -> list[str]:
    return [sys.executable, str(ROOT / "manage.py")]


def test_the_exporter_refuses_to_start_without_a_directory_or_a_token(tmp_path) -> None:
    env = deployment_env(tmp_path)
    no_dir = manage(env, "metrics_exporter", "--port", str(free_port()))
    assert no_dir.returncode == 1 and "PROMETHEUS_MULTIPROC_DIR is not set" in no_dir.stderr
    no_token = manage({**env, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "m")}, "metrics_exporter")
    assert no_token.returncode == 1 and "set RUNLEDGER_METRICS_TOKEN" in no_token.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian: prometheus)")
def test_the_shipped_alerting_rules_pass_promtool() -> None:
    checked = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yml"],
        cwd=ROOT / "tests" / "support" / "promtool",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
