"""What every dashboard view shares: the typed request, permission-checked lookups, refusals.

Every view checks its permission on the server twice over: a decorator before anything else
(so a refused user cannot probe which runs exist), and the lookup that loads the row, which
takes the permission too — there is no lookup here that does not check one. Acting views call
one function of ``ledger.transitions``; those either change the ledger completely or raise and
change nothing, and ``render_refused`` shows the same page again with the message and, on a
conflict, the row as it is now.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails

from ledger import selectors, transitions
from ledger.inputs import queryable
from ledger.models import Run, Settlement, Step
from runs.dashboard import presenting
from runs.dashboard.models import VIEW_DASHBOARD
from runs.dashboard.teams import team_of, teams_for

View = Callable[..., HttpResponse]
#: A permission, or several of which the user must hold at least one.
Perm = str | tuple[str, ...]


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def require(request: HttpRequest, perm: Perm) -> None:
    """403 unless the signed-in user holds ``perm`` (or, given several, at least one)."""
    perms = (perm,) if isinstance(perm, str) else perm
    if any(request.user.has_perm(p) for p in perms):
        return
    if len(perms) == 1:
        raise PermissionDenied(f"this needs the permission {perms[0]}")
    raise PermissionDenied(f"this needs one of the permissions {', '.join(perms)}")


def permission_any(*perms: str) -> Callable[[View], View]:
    """403 unless the signed-in user holds at least one of ``perms`` (use after login_required)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            require(request, perms)
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def seen_teams(request: HttpRequest, perm: str = VIEW_DASHBOARD) -> frozenset[str] | None:
    """The teams whose runs this person may see (or act on, given ``perm``); None: every team.
    Every list, count and search of the dashboard is narrowed by it (``scope_runs``)."""
    return teams_for(request.user, perm)


def require_every_team(request: HttpRequest, perm: Perm) -> None:
    """403 unless the person holds ``perm`` (one of them) in every team: for the acts that are
    not about one team's runs (a global pause, an effect audit pass over all runs)."""
    perms = (perm,) if isinstance(perm, str) else perm
    require(request, perms)
    if not any(teams_for(request.user, p) is None for p in perms):
        raise PermissionDenied("this needs the role in every team, not in some teams")


def require_in_team(request: HttpRequest, obj: Any, *, perm: Perm, missing: str) -> None:
    """404 (``missing``) unless the person may see ``obj``'s team — a run of another team is
    answered as a missing one; 403 unless they hold ``perm`` (one of them) in that team."""
    user = request.user
    if not user.has_perm(VIEW_DASHBOARD, obj):
        raise Http404(missing)
    perms = (perm,) if isinstance(perm, str) else perm
    if not any(user.has_perm(p, obj) for p in perms):
        raise PermissionDenied(f"this needs {' or '.join(perms)} in the team {team_of(obj) or '?'}")


def filter_text(request: HttpRequest, name: str, *, source: Any = None) -> str | None:
    """A free-text filter (an agent's name) from the query or ``source``, or None. Text the
    database cannot take (a NUL byte, a lone surrogate) is dropped with a message, never a 500."""
    data = request.GET if source is None else source
    text = str(data.get(name, "")).strip()[:100]
    if text and not queryable(text):
        messages.warning(request, f"Ignored the {name} filter: it holds a NUL byte or bad Unicode.")
        return None
    return text or None


def run_for(request: HttpRequest, run_id: str, *, perm: Perm) -> Run:
    """The run, after checking the user may act this way: 403 without ``perm``, 404 if none
    or if it is another team's (one the person may not see); 403 without ``perm`` in its team."""
    require(request, perm)
    try:
        run = selectors.run_detail(run_id=run_id)
    except Run.DoesNotExist:
        raise Http404(f"no run {run_id!r}") from None
    require_in_team(request, run, perm=perm, missing=f"no run {run_id!r}")
    return run


def step_for(request: HttpRequest, run_id: str, pk: int, *, perm: Perm) -> Step:
    """Step ``pk`` of the run: 403 without ``perm``, 404 unless the run has it."""
    require(request, perm)
    try:
        step = selectors.step_of_run(run_id=run_id, pk=pk)
    except Step.DoesNotExist:
        raise Http404(f"run {run_id!r} has no step #{pk}") from None
    require_in_team(request, step, perm=perm, missing=f"run {run_id!r} has no step #{pk}")
    return step


def settlement_for(request: HttpRequest, pk: int, *, perm: Perm) -> Settlement:
    """Settlement ``pk``: 403 without ``perm``, 404 if none."""
    require(request, perm)
    try:
        settlement = selectors.settlement_detail(pk=pk)
    except Settlement.DoesNotExist:
        raise Http404(f"no settlement #{pk}") from None
    require_in_team(request, settlement, perm=perm, missing=f"no settlement #{pk}")
    return settlement


def render_refused(
    request: HttpRequest, template: str, context: dict[str, Any], exc: transitions.OperationError
) -> HttpResponse:
    """``template`` again with what was refused and, on a conflict, the row as it is now.

    Status 409 for a conflict or a state that does not allow the action, 400 for bad input.
    """
    current = exc.current if isinstance(exc, transitions.Conflict) else {}
    refused = {
        "refused": str(exc),
        "conflict": isinstance(exc, transitions.Conflict),
        "current_text": presenting.pretty(current) if current else "",
    }
    status = 400 if isinstance(exc, transitions.InvalidInput) else 409
    return render(request, template, {**context, **refused}, status=status)
