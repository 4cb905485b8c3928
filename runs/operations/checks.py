"""The project's system checks (``manage.py check``; ``check --deploy`` adds the deploy ones).

- ``runledger.E002`` (deploy): ``SECRET_KEY`` is not set in the environment. Each machine then
  makes its own key, and sessions, CSRF tokens and signed links break across web nodes.
- ``runledger.E003``: ``RUNLEDGER_METRICS_NETWORKS`` is set but no proxy is named
  (``RUNLEDGER_TRUSTED_PROXIES``): behind an unnamed local proxy every client would be the
  proxy's address, inside the allow-list.
- ``runledger.W002``: ``AXES_IP_HEADERS`` or ``AXES_IPWARE_PROXY_COUNT`` is set; they never had
  an effect and are deprecated for ``RUNLEDGER_TRUSTED_PROXIES``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register


@register(Tags.security, deploy=True)
def secret_key_is_set(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if settings.RUNLEDGER_SECRET_KEY_SET or settings.DEBUG:
        return []
    return [
        Error(
            "SECRET_KEY is not set: this machine made its own and keeps it in "
            "RUNLEDGER_VAR_DIR/secret_key.",
            hint="Set SECRET_KEY in the environment of every web, worker and beat process "
            "(one value for all machines): with a key per machine, sessions and CSRF tokens "
            "break whenever a request reaches another web node.",
            id="runledger.E002",
        )
    ]


@register(Tags.security)
def metrics_networks_name_the_proxy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    if settings.RUNLEDGER_METRICS_NETWORKS and not settings.RUNLEDGER_PROXY_NAMED:
        found.append(
            Error(
                "RUNLEDGER_METRICS_NETWORKS is set but RUNLEDGER_TRUSTED_PROXIES names no proxy.",
                hint="Name the proxy in front of the web (e.g. RUNLEDGER_TRUSTED_PROXIES="
                "127.0.0.1), or `none` when Prometheus reaches gunicorn directly: behind an "
                "unnamed proxy every client has the proxy's address. Or use "
                "RUNLEDGER_METRICS_TOKEN alone.",
                id="runledger.E003",
            )
        )
    if settings.RUNLEDGER_AXES_IPWARE_SET:
        found.append(
            Warning(
                f"{' and '.join(settings.RUNLEDGER_AXES_IPWARE_SET)} set: deprecated, and "
                "without effect (django-ipware is not installed).",
                hint="Sign-in lock-outs count by the client address a trusted proxy forwards: "
                "set RUNLEDGER_TRUSTED_PROXIES (and RUNLEDGER_CLIENT_ADDRESS_HEADER if your "
                "proxy does not use X-Forwarded-For).",
                id="runledger.W002",
            )
        )
    return found
