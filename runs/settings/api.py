"""The HTTP API: the body limit, each token's rate, and the cache the rate is counted in."""

from __future__ import annotations

from runs.settings import env, sections

RUNLEDGER_API_MAX_BODY_BYTES = env.int(
    "RUNLEDGER_API_MAX_BODY_BYTES",
    1024 * 1024,
    section=sections.API,
    doc="A request body over this many bytes is refused with 413 before it is read.",
)
RUNLEDGER_API_RATE = env.str(
    "RUNLEDGER_API_RATE",
    "1200/m",
    section=sections.API,
    doc="Requests one API token may send (`N/s`, `N/m`, `N/h`); past it the API answers 429 "
    "with `Retry-After`. Counted in the cache (`RUNLEDGER_CACHE_URL`).",
)
RUNLEDGER_CACHE_URL = env.str(
    "RUNLEDGER_CACHE_URL",
    "",
    section=sections.API,
    doc="A Redis URL (`redis://host:6379/1`) for the cache the API's rate limit counts in, "
    "shared by every web process. Empty: each process counts in its own memory.",
    shown="(empty: in-process memory)",
)
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": RUNLEDGER_CACHE_URL}
        if RUNLEDGER_CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
