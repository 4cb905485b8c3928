"""deploy/kubernetes/, rendered with ``kubectl kustomize`` (kustomize is built into kubectl) and
every object validated against Kubernetes 1.30's own OpenAPI schemas (kubernetes-validate,
strict: an unknown or misspelt field is an error), then read as an operator would: the probes
point at the probes the web process answers, a worker's drain has its grace, exactly one beat
that an upgrade replaces rather than doubles, nothing runs as root, secrets only from the
Secret. Skipped where kubectl is not installed."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.support.packaging import ROOT

pytestmark = pytest.mark.sqlite_ok
MANIFESTS = ROOT / "deploy" / "kubernetes"
KUBERNETES = "1.30.0"


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("needs kubectl (kustomize is built into it)")
    out = subprocess.run(
        ["kubectl", "kustomize", str(MANIFESTS)], capture_output=True, text=True, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _by(rendered: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in rendered if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_every_object_is_valid_for_kubernetes(rendered: list[dict[str, Any]]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in rendered)
    assert kinds == [
        "ConfigMap/runledger",
        "Deployment/runledger-beat",
        "Deployment/runledger-web",
        "Deployment/runledger-worker",
        "Job/runledger-migrate",
        "Service/runledger-web",
    ]
    for doc in rendered:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_web_probes_are_the_web_process_probes(rendered: list[dict[str, Any]]) -> None:
    [web] = _pod(_by(rendered, "Deployment", "runledger-web"))["containers"]
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["ports"][0]["containerPort"] == 8000
    service = _by(rendered, "Service", "runledger-web")
    assert (
        service["spec"]["selector"].items()
        <= _by(rendered, "Deployment", "runledger-web")["spec"]["template"]["metadata"][
            "labels"
        ].items()
    )


def test_a_worker_has_time_to_drain(rendered: list[dict[str, Any]]) -> None:
    worker = _by(rendered, "Deployment", "runledger-worker")
    assert _pod(worker)["terminationGracePeriodSeconds"] >= 90
    assert _pod(worker)["containers"][0]["command"][:2] == ["runledger", "worker"]
    # A rolling upgrade never leaves fewer workers than asked for.
    assert worker["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_exactly_one_beat_replaced_not_doubled(rendered: list[dict[str, Any]]) -> None:
    beat = _by(rendered, "Deployment", "runledger-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"
    assert _pod(beat)["containers"][0]["command"][:2] == ["runledger", "beat"]


def test_nothing_runs_as_root_and_secrets_come_from_the_secret(
    rendered: list[dict[str, Any]],
) -> None:
    config = _by(rendered, "ConfigMap", "runledger")
    assert not {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL"} & set(config["data"])
    for doc in rendered:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = _pod(doc)
        assert pod["securityContext"]["runAsNonRoot"] is True, doc["metadata"]["name"]
        assert pod["securityContext"]["runAsUser"] == 999  # the image's user
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            sources = [s.get("secretRef", {}).get("name") for s in container["envFrom"]]
            assert "runledger" in sources, doc["metadata"]["name"]
            assert not [e for e in container.get("env", []) if "value" in e and "KEY" in e["name"]]
