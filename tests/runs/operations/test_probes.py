"""Health, readiness and metrics, through Django's test client."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from ledger import transitions

pytestmark = pytest.mark.django_db


def test_healthz_answers_without_sign_in_or_an_allowed_host() -> None:
    response = Client(HTTP_HOST="10.1.2.3").get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-store" in response["Cache-Control"]


def test_readyz_warns_of_a_sweep_that_never_ran_or_is_late_and_stays_ready(settings) -> None:
    # Issue 24: a late sweep (the control process or beat down, or before the fix a deep queue)
    # turned /readyz red on every web node at once; it is a warning, the node still serves.
    first = Client().get("/readyz")
    assert first.status_code == 200
    body = first.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"] == {"ok": True}
    assert body["checks"]["migrations"] == {"ok": True}
    assert body["checks"]["broker"] == {"ok": True}
    assert body["checks"]["sweep"]["ok"] is True
    assert "never ran" in body["checks"]["sweep"]["warning"]

    transitions.beacon_beat(name="sweep", detail={"requeued": 0})
    assert Client().get("/readyz").json() == {
        "status": "ok",
        "checks": {
            "database": {"ok": True},
            "migrations": {"ok": True},
            "broker": {"ok": True},
            "sweep": {"ok": True, "age_seconds": pytest.approx(0, abs=30)},
            "agent_modules": {"ok": True},
        },
    }

    late = settings.RUNLEDGER_READY_SWEEP_LATE_SECONDS + 5
    transitions.beacon_beat(
        name="sweep", detail={}, clock=lambda: timezone.now() - timedelta(seconds=late)
    )
    response = Client().get("/readyz")
    assert response.status_code == 200
    sweep = response.json()["checks"]["sweep"]
    assert sweep["ok"] is True and sweep["age_seconds"] >= late
    assert "runledger beat" in sweep["warning"]


def test_readyz_names_an_unreachable_broker_without_its_url(settings) -> None:
    settings.CELERY_BROKER_URL = "redis://:s3cret@127.0.0.1:1/0"
    from runs.celery import app

    app.conf.broker_url = settings.CELERY_BROKER_URL
    app.conf.broker_transport = None
    try:
        response = Client().get("/readyz")
    finally:
        app.config_from_object("django.conf:settings", namespace="CELERY")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"]["ok"] is False
    assert "s3cret" not in response.content.decode()


def test_metrics_refuses_other_networks_and_admits_the_token(settings) -> None:
    settings.RUNLEDGER_METRICS_TOKEN = "tok-123"
    outside = Client(REMOTE_ADDR="203.0.113.9")
    assert outside.get("/metrics").status_code == 403
    assert outside.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    allowed = outside.get("/metrics", HTTP_AUTHORIZATION="Bearer tok-123")
    assert allowed.status_code == 200
    assert b"runledger_runs" in allowed.content


@pytest.mark.django_db(transaction=True)
def test_the_step_counter_grows_when_a_run_executes(execute, settings) -> None:
    settings.RUNLEDGER_METRICS_TOKEN = "tok-123"
    scraper = Client(HTTP_AUTHORIZATION="Bearer tok-123")
    before = scraper.get("/metrics").content.decode()
    run = transitions.run_start(agent="survey", inputs={"records": 3})
    assert execute(run.run_id).status == "succeeded"
    after = scraper.get("/metrics").content.decode()

    def steps(text: str) -> float:
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("runledger_steps_written_total{")
        )

    assert steps(after) >= steps(before) + 3
    assert 'runledger_runs{reason="",status="succeeded"} 1.0' in after
    assert "runledger_step_write_seconds_bucket" in after
