"""``/healthz``, ``/readyz`` and ``/metrics``: answered before Django's host check and HTTPS
redirect, so that a load balancer or Prometheus can reach any web process by its address.

- ``/healthz``: liveness. The process answers; nothing else is checked.
- ``/readyz``: readiness of *this node*: the database answers, every migration is applied, the
  broker accepts a connection, every agent module imported in this process. 200 when all hold,
  503 otherwise; JSON naming each check, never a secret (no URL, no password). Beside them, two
  reports that never fail readiness: the recovery sweep's age (``sweep``, with a ``warning`` when
  it is late) and the agent modules a running worker failed to import (``agent_modules``'s
  ``warning``). A late sweep means a worker's control process or beat is down, which no web
  node can mend — pulling every web node from the load balancer for it would only add an
  outage. It is a metric (``runledger_sweep_lag_seconds``) and an alert instead.
- ``/metrics``: Prometheus text (runs.operations.metrics), for requests carrying
  ``Authorization: Bearer <RUNLEDGER_METRICS_TOKEN>`` and, opted in, clients in
  RUNLEDGER_METRICS_NETWORKS (behind a trusted proxy: the forwarded client); 403 to anyone else.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from runs.operations.proxies import client_address

Check = dict[str, Any]
_migrated = False  # once every migration is applied it stays so for this process's code


def check_database() -> Check:
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
    return {"ok": True}


def check_migrations() -> Check:
    global _migrated
    if not _migrated:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            return {"ok": False, "detail": f"{len(plan)} migrations not applied"}
        _migrated = True
    return {"ok": True}


def check_broker() -> Check:
    from runs.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=int(settings.RUNLEDGER_READY_BROKER_SECONDS))
    return {"ok": True}


def check_sweep() -> Check:
    """Informational (never fails readiness): the sweep's age, and a warning when it is late."""
    from ledger.models import Beacon

    beacon = Beacon.objects.filter(name="sweep").first()
    if beacon is None:
        return {
            "ok": True,
            "warning": "the recovery sweep never ran (are `runledger worker` and beat up?)",
        }
    age = max((timezone.now() - beacon.at).total_seconds(), 0.0)
    late = settings.RUNLEDGER_READY_SWEEP_LATE_SECONDS
    if age > late:
        return {
            "ok": True,
            "age_seconds": round(age, 1),
            "warning": f"the recovery sweep last ran {age:.0f} s ago (over {late:.0f} s): "
            "is `runledger worker` (its control process) and `runledger beat` running?",
        }
    return {"ok": True, "age_seconds": round(age, 1)}


WORKER_BEACON = "worker:"


def worker_started(hostname: str) -> None:
    """A worker's start: log each agent module that failed to import, and record them (or
    none) in its beacon for ``check_agent_modules``."""
    import logging

    from ledger import registry, transitions

    errors = registry.import_errors()
    for module, error in errors.items():
        logging.getLogger(__name__).error(
            "worker %s: agent module %s failed to import (%s); this worker takes no run of "
            "the agents it defines",
            hostname,
            module,
            error,
        )
    transitions.beacon_beat(name=WORKER_BEACON + hostname, detail={"import_errors": errors})


def worker_stopped(hostname: str) -> None:
    from ledger import transitions

    transitions.beacon_forget(name=WORKER_BEACON + hostname)


def check_agent_modules() -> Check:
    """Every agent module imported. Fails readiness only when one failed in *this* process (its
    deploy is broken); a worker's failed import is reported with a ``warning`` (that worker
    leaves the runs of those agents queued) but is no reason to pull this web node."""
    from ledger import registry
    from ledger.models import Beacon

    mine = registry.import_errors()
    broken = {"this process": mine} if mine else {}
    for beacon in Beacon.objects.filter(name__startswith=WORKER_BEACON):
        if beacon.detail.get("import_errors"):
            broken[beacon.name.removeprefix(WORKER_BEACON)] = beacon.detail["import_errors"]
    if not broken:
        return {"ok": True}
    where = "; ".join(f"{w}: {', '.join(sorted(errors))}" for w, errors in broken.items())
    detail = f"agent modules failed to import ({where})"
    if mine:
        return {"ok": False, "broken": broken, "detail": detail}
    return {"ok": True, "broken": broken, "warning": detail}


CHECKS: dict[str, Callable[[], Check]] = {
    "database": check_database,
    "migrations": check_migrations,
    "broker": check_broker,
    "sweep": check_sweep,
    "agent_modules": check_agent_modules,
}


def readiness() -> tuple[bool, dict[str, Check]]:
    results: dict[str, Check] = {}
    for name, check in CHECKS.items():
        try:
            results[name] = check()
        except Exception as exc:  # a check that cannot run is a failed check, never a 500
            results[name] = {"ok": False, "detail": f"{type(exc).__name__}"}
        if name == "database" and not results[name]["ok"]:
            break  # the other checks read the database
    return all(r["ok"] for r in results.values()) and len(results) == len(CHECKS), results


def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> HttpResponse:
    ok, checks = readiness()
    return JsonResponse(
        {"status": "ok" if ok else "fail", "checks": checks}, status=200 if ok else 503
    )


def metrics_allowed(meta: Mapping[str, Any]) -> bool:
    """The token, or (opted in) a client in RUNLEDGER_METRICS_NETWORKS: the client being the one
    a trusted proxy forwards (runs.operations.proxies), never the proxy itself."""
    token = settings.RUNLEDGER_METRICS_TOKEN
    given = str(meta.get("HTTP_AUTHORIZATION", ""))
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return True
    if not settings.RUNLEDGER_METRICS_NETWORKS:
        return False
    address = client_address(meta)
    if address is None:
        return False
    return any(ipaddress.ip_address(address) in net for net in settings.RUNLEDGER_METRICS_NETWORKS)


def metrics(request: HttpRequest) -> HttpResponse:
    if not metrics_allowed(request.META):
        return JsonResponse({"status": "forbidden"}, status=403)
    from runs.operations.metrics import exposition

    body, content_type = exposition()
    return HttpResponse(body, content_type=content_type)


PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/readyz": readyz,
    "/metrics": metrics,
}


class ProbesMiddleware:
    """Answers the probe paths itself (GET and HEAD only: 405 otherwise; no session, no cookie)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info.rstrip("/") or "/")
        if probe is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            return JsonResponse({"status": "method not allowed"}, status=405)
        response = probe(request)
        add_never_cache_headers(response)
        return response
