"""HTTPS, cookies, sessions, sign-in throttling (django-axes) and the Content-Security-Policy.

With DEBUG off, cookies are Secure, HSTS is on and plain HTTP is redirected to HTTPS, so that
``manage.py check --deploy`` is clean with only SECRET_KEY and ALLOWED_HOSTS set. Development
over plain HTTP (the demo, a laptop) sets RUNLEDGER_PLAIN_HTTP=1, which turns all three off.
"""

from __future__ import annotations

from runs.operations.proxies import parse_networks
from runs.settings import env, sections
from runs.settings.base import DEBUG

RUNLEDGER_PLAIN_HTTP = env.bool(
    "RUNLEDGER_PLAIN_HTTP",
    DEBUG,
    section=sections.WEB,
    shown="as DEBUG",
    doc="Serve over plain HTTP: turns off the HTTPS redirect, Secure cookies and HSTS (the "
    "defaults of the three settings below). For the demo and a laptop.",
)
_https = not RUNLEDGER_PLAIN_HTTP


def _on_over_https(name: str, doc: str) -> bool:
    """A switch that is on unless the site is served over plain HTTP (RUNLEDGER_PLAIN_HTTP)."""
    return env.bool(
        name, _https, section=sections.WEB, shown="on, off with RUNLEDGER_PLAIN_HTTP", doc=doc
    )


SECURE_SSL_REDIRECT = _on_over_https(
    "SECURE_SSL_REDIRECT", "Redirect plain HTTP to HTTPS (Django's setting)."
)
SESSION_COOKIE_SECURE = _on_over_https(
    "SESSION_COOKIE_SECURE", "Send the session cookie over HTTPS only."
)
CSRF_COOKIE_SECURE = _on_over_https("CSRF_COOKIE_SECURE", "Send the CSRF cookie over HTTPS only.")
SECURE_HSTS_SECONDS = env.int(
    "SECURE_HSTS_SECONDS",
    31536000 if _https else 0,
    section=sections.WEB,
    shown="31536000 (a year), 0 with RUNLEDGER_PLAIN_HTTP",
    doc="HTTP Strict Transport Security's max-age.",
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _on_over_https(
    "SECURE_HSTS_INCLUDE_SUBDOMAINS", "HSTS covers subdomains too."
)
SECURE_HSTS_PRELOAD = _on_over_https(
    "SECURE_HSTS_PRELOAD", "Ask browsers to preload HSTS for this site."
)


def _proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto: https`` (the header your proxy sets on HTTPS requests) as Django
    wants it: ``("HTTP_X_FORWARDED_PROTO", "https")``. Empty: no proxy header is trusted."""
    if not value.strip():
        return None
    name, sep, expected = value.partition(":")
    if not sep or not name.strip() or not expected.strip():
        raise ValueError(
            f"RUNLEDGER_PROXY_SSL_HEADER must read 'Header-Name: value', not {value!r}"
        )
    return "HTTP_" + name.strip().upper().replace("-", "_"), expected.strip()


SECURE_PROXY_SSL_HEADER = _proxy_ssl_header(
    env.str(
        "RUNLEDGER_PROXY_SSL_HEADER",
        "",
        section=sections.WEB,
        doc="The header your TLS-terminating proxy sets on HTTPS requests, as `Header-Name: "
        "value` (e.g. `X-Forwarded-Proto: https`). Empty: no proxy header is trusted.",
    )
)
USE_X_FORWARDED_HOST = env.bool(
    "USE_X_FORWARDED_HOST",
    False,
    section=sections.WEB,
    doc="Trust the proxy's `X-Forwarded-Host` for the request's host.",
)
CSRF_TRUSTED_ORIGINS = env.list(
    "CSRF_TRUSTED_ORIGINS",
    [],
    section=sections.WEB,
    doc="Comma-separated origins (`https://runs.example.com`) trusted for unsafe requests.",
)
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_AGE = env.int(
    "RUNLEDGER_SESSION_SECONDS",
    8 * 3600,
    section=sections.SIGN_IN,
    doc="A session lasts this long from sign-in (8 h).",
)
SESSION_EXPIRE_AT_BROWSER_CLOSE = env.bool(
    "RUNLEDGER_SESSION_BROWSER_CLOSE",
    False,
    section=sections.SIGN_IN,
    doc="End the session when the browser closes.",
)
# Sign-in throttling (django-axes): after AXES_FAILURE_LIMIT wrong passwords for one user name
# from one address, that pair is locked out for AXES_COOLOFF_MINUTES (`manage.py axes_reset`,
# `axes_reset_username NAME` or `axes_reset_ip ADDR` unlock it at once).
AXES_FAILURE_LIMIT = env.int(
    "AXES_FAILURE_LIMIT",
    5,
    section=sections.SIGN_IN,
    doc="Wrong passwords for one user name from one address before that pair is locked out.",
)
AXES_COOLOFF_TIME = (
    env.float(
        "AXES_COOLOFF_MINUTES",
        15.0,
        section=sections.SIGN_IN,
        doc="How long a lockout lasts (`manage.py axes_reset` lifts it at once).",
    )
    / 60
)  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_RESET_ON_SUCCESS = True
# Behind a proxy every connection comes from the proxy: the client's address is taken from the
# proxy's header, but only on connections from a proxy named here (runs.operations.proxies).
_proxies = env.list(
    "RUNLEDGER_TRUSTED_PROXIES",
    [],
    section=sections.WEB,
    doc="Comma-separated addresses or networks of the proxies in front of the web processes "
    "(`127.0.0.1` for a proxy on the same machine), or `none` when clients (and Prometheus) "
    "reach gunicorn directly. Only on connections from these is the client's address read "
    "from `RUNLEDGER_CLIENT_ADDRESS_HEADER`: for sign-in lock-outs, `/metrics`' allow-list "
    "and the logs. Empty: no header is trusted.",
)
RUNLEDGER_PROXY_NAMED = bool(_proxies)  # `none` names "no proxy"; empty names nothing
RUNLEDGER_TRUSTED_PROXIES = parse_networks(
    [p for p in _proxies if p.lower() != "none"], name="RUNLEDGER_TRUSTED_PROXIES"
)
RUNLEDGER_CLIENT_ADDRESS_META = "HTTP_" + env.str(
    "RUNLEDGER_CLIENT_ADDRESS_HEADER",
    "X-Forwarded-For",
    section=sections.WEB,
    doc="The header a trusted proxy puts the client's address in (the right-most address "
    "that is not a trusted proxy is the client's).",
).strip().upper().replace("-", "_")
# django-axes counts lock-outs by (user name, client address) with the rule above.
AXES_CLIENT_IP_CALLABLE = "runs.operations.proxies.client_ip"
# Deprecated: django-axes read these through django-ipware, which is not installed, so they never
# had an effect. Still read so that a deployment that set them is told (runs.operations.checks).
RUNLEDGER_AXES_IPWARE_SET = [
    name
    for name, value in (
        (
            "AXES_IP_HEADERS",
            env.str(
                "AXES_IP_HEADERS",
                "",
                section=sections.SIGN_IN,
                doc="Deprecated, without effect: set `RUNLEDGER_TRUSTED_PROXIES` (and "
                "`RUNLEDGER_CLIENT_ADDRESS_HEADER`).",
            ),
        ),
        (
            "AXES_IPWARE_PROXY_COUNT",
            env.str(
                "AXES_IPWARE_PROXY_COUNT",
                "",
                section=sections.SIGN_IN,
                doc="Deprecated, without effect: set `RUNLEDGER_TRUSTED_PROXIES`.",
            ),
        ),
    )
    if value
]
# The Django admin's URL prefix; `off` does not mount it.
_admin = env.str(
    "RUNLEDGER_ADMIN_URL",
    "admin/",
    section=sections.WEB,
    doc="Where the Django admin is mounted (`admin/`, or e.g. `ops-7f3a/`); `off` does not "
    "mount it at all (the dashboard works without it).",
).strip()
RUNLEDGER_ADMIN_URL = "" if _admin.lower() in ("off", "", "none") else _admin.strip("/") + "/"
_CSP_REPORT_URI = env.str(
    "RUNLEDGER_CSP_REPORT_URI",
    "",
    section=sections.WEB,
    doc="Where browsers report Content-Security-Policy violations. Empty: nowhere.",
)
# Content-Security-Policy (django-csp): scripts, styles and connections from this site only;
# no inline script or style (htmx's own indicator style is turned off in base.html).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
        **({"report-uri": [_CSP_REPORT_URI]} if _CSP_REPORT_URI else {}),
    }
}
