"""Property: no dashboard view answers 500 to hostile input, and none writes anything for it.

Every URL pattern of the dashboard (``runs.dashboard.urls``, enumerated, so a new view is
covered without editing this file) gets GET and POST requests from an admin and a viewer, with
hostile values in its URL (run ids, step and settlement numbers) and in every query parameter
and form field the dashboard reads: NUL bytes, 5,000-digit numbers, 64-bit overflows, deeply
nested JSON, dates at the ends of the calendar, damaged page cursors, markup, paths. The values
sent to acting forms must be refused (a ``seen_version`` that is no row's version, step ids
and targets that name nothing), so the property is exact: status below 500, and the row counts
of runs, steps, settlements and audit events unchanged.

Two tests share the values: a sweep that sends every hostile value in every field of every
view at once (so each parser meets each value: a random draw would miss most pairs), and a
Hypothesis property that draws roles, methods, URL parts and sparse field sets at random.
Bounded for a busy machine: a fixed number of requests per URL pattern, no deadline.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cluster import Cluster
from ledger.models import AuditEvent, Run, Settlement, Step
from runs.dashboard.urls import urlpatterns as dashboard
from tests.support.dashboard_runs import renewal_run, restore_roles, rewind, succeeded_run, user_in

pytestmark = [pytest.mark.django_db(transaction=True)]

EXAMPLES = 15  # per URL pattern; each example is one request


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


HOSTILE = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "9" * 5_000,
    "-1",
    "0",
    "2147483648",
    "9223372036854775808",
    "-9223372036854775809",
    "1e309",
    "NaN",
    "Infinity",
    "٣",
    "½",
    "9999-12-31",
    "0001-01-01",
    "2020-02-30",
    "99999-01-01",
    "[" * 1_000 + "]" * 1_000,
    "[" * 100_000,
    '{"a":' * 5_000 + "1" + "}" * 5_000,
    '{"a": "\\u0000"}',
    '"\\ud800"',
    "[]",
    "{}",
    "null",
    "<script>alert(1)</script>",
    "../../etc/passwd",
    "a/b",
    "%00",
    "%2F",
    "run_does_not_exist",
    "x" * 10_000,
    "' OR 1=1 --",
    "😀",
    "\n\r\t",
    ":",
    "a:1",
    "run_nobody:1",
    "run_nobody:" + "9" * 5_000,
    _cursor(b"2020-01-01T00:00:00+00:00|\x00"),
    _cursor(b"9999-12-31T23:59:59-14:00|x"),
    _cursor(b"0001-01-01T00:00:00+14:00|x"),
    _cursor(b"2020-01-01T00:00:00+00:00|" + b"9" * 5_000),
    _cursor(b"\xff\xfe"),
    "999999999999999999999d",
    "30m",
    "newest",
    "oldest",
    "needs_attention",
    "happened",
    "not_happened",
    "abandon",
    "resume",
    "cancel",
    "filter",
    "1",
]
#: One value of each kind of trouble, for the sweep (every field of every view at once).
SWEEP = [
    "",
    "a\x00b",
    "9" * 5_000,
    "9223372036854775808",
    "-1",
    "٣",
    "1e309",
    "NaN",
    "9999-12-31",
    "0001-01-01",
    "[" * 990 + "]" * 990,
    "[" * 100_000,
    '{"a":' * 5_000 + "1" + "}" * 5_000,
    '{"a": "\\u0000"}',
    "a/b",
    "..",
    "<script>alert(1)</script>",
    "run_nobody:" + "9" * 5_000,
    _cursor(b"2020-01-01T00:00:00+00:00|\x00"),
    _cursor(b"0001-01-01T00:00:00+14:00|x"),
    _cursor(b"2020-01-01T00:00:00+00:00|" + b"9" * 5_000),
]
#: Text without lone surrogates (a browser cannot send them: they are not UTF-8).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
VALUE = st.one_of(st.sampled_from(HOSTILE), TEXT, st.integers().map(str))
#: Every query parameter and form field the dashboard's views and forms read.
FIELDS = [
    "status", "reason", "agent", "age", "q", "order", "after", "digest", "step", "page",
    "compare", "collapsed", "download", "scope", "action", "run", "max_resumes", "target",
    "seen_version", "outcome", "result", "step_id", "actor", "since", "until", "before",
]  # fmt: skip


def _is_a_version(text: str) -> bool:
    """Would a form read ``text`` as a version some row may have?"""
    try:
        number = forms.IntegerField().clean(text)
    except ValidationError:
        return False
    return number is not None and 0 < number < 1_000_000


NOT_A_VERSION = VALUE.filter(lambda v: not _is_a_version(v))
PARAMS = st.dictionaries(
    st.sampled_from(FIELDS), st.one_of(VALUE, st.lists(VALUE, max_size=3)), max_size=8
)


@pytest.fixture(autouse=True)
def broker(tmp_path: Path) -> Iterator[Cluster]:
    """A broker folder of this test's own: anything a view enqueued would land here."""
    cluster = Cluster(tmp_path / "broker")
    with cluster.producing():
        yield cluster


@pytest.fixture
def world(execute, clock, crash_at, settings) -> dict[str, Any]:
    """Real rows for URLs to name: a finished run and one blocked on a settlement."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    restore_roles()
    rewind(clock)
    execute.clock = clock
    runs = [succeeded_run(execute), renewal_run(execute, crash_at)]
    admin = Client(raise_request_exception=False)
    admin.force_login(User.objects.create_superuser(username="root", password=None))
    viewer = Client(raise_request_exception=False)
    viewer.force_login(user_in("viewer", name="vic"))
    return {
        "run_ids": [r.run_id for r in runs],
        "step_pks": [str(pk) for pk in Step.objects.values_list("pk", flat=True)],
        "clients": {"admin": admin, "viewer": viewer},
    }


def counts() -> tuple[int, int, int, int]:
    return (
        Run.objects.count(),
        Step.objects.count(),
        Settlement.objects.count(),
        AuditEvent.objects.count(),
    )


_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")


def _url(route: str, parts: dict[str, str]) -> str:
    return "/" + _CONVERTER.sub(lambda m: quote(parts[m.group(2)], safe=""), route)


def _route_values(world: dict[str, Any]) -> st.SearchStrategy[dict[str, str]]:
    run_id = st.one_of(st.sampled_from(world["run_ids"]), VALUE.filter(bool))
    pk = st.one_of(
        st.sampled_from(world["step_pks"]),
        st.sampled_from(["0", "999999", "9" * 30, "9" * 5_000]),
        VALUE.filter(bool),
    )
    token = VALUE.filter(bool)  # an approval link's token (never a valid signature here)
    # A schedule's id: none exists here, so a pause or resume finds nothing to act on.
    schedule = st.one_of(st.just("sch_0000"), VALUE.filter(bool))
    return st.fixed_dictionaries(
        {"run_id": run_id, "pk": pk, "token": token, "schedule_id": schedule}
    )


def _send(client: Client, method: str, url: str, params: dict[str, Any]) -> None:
    before = counts()
    response = client.get(url, params) if method == "get" else client.post(url, params)
    assert response.status_code < 500, (method, url, {k: str(v)[:80] for k, v in params.items()})
    assert counts() == before, (method, url, {k: str(v)[:80] for k, v in params.items()})


@pytest.mark.parametrize("pattern", dashboard, ids=lambda p: p.name)
def test_every_hostile_value_in_every_field_of_every_view_is_refused_cleanly(
    world, pattern
) -> None:
    """An admin (who may do everything) sends each hostile value in all fields at once, to
    each view with real rows in its URL; the choices that gate parsing are set so the
    parsers behind them run (a settlement that "happened" parses its result; a bulk action
    parses its budget)."""
    route = str(pattern.pattern)
    client = world["clients"]["admin"]
    parts = {
        "run_id": world["run_ids"][1],
        "pk": world["step_pks"][-1],
        "token": "not-a-link",
        "schedule_id": "sch_0000",
    }
    url = _url(route, parts)
    for value in SWEEP:
        params: dict[str, Any] = dict.fromkeys(FIELDS, value)
        params.update(outcome="happened", action="resume")
        if _is_a_version(value):
            params["seen_version"] = "0"
        for method in ("get", "post"):
            _send(client, method, url, params)


@pytest.mark.parametrize("pattern", dashboard, ids=lambda p: p.name)
def test_no_view_answers_500_or_writes_anything_for_hostile_input(world, pattern) -> None:
    route = str(pattern.pattern)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        role=st.sampled_from(["admin", "viewer"]),
        method=st.sampled_from(["get", "post"]),
        parts=_route_values(world),
        params=PARAMS,
        seen_version=NOT_A_VERSION,
    )
    def check(
        role: str, method: str, parts: dict[str, str], params: dict[str, Any], seen_version: str
    ) -> None:
        if method == "post":  # an acting form must be refused: no row has this version
            params = {**params, "seen_version": seen_version}
        _send(world["clients"][role], method, _url(route, parts), params)

    check()
