"""What the acting views share: permission checks, lookups, and how a refusal is shown.

Every acting view checks its permission on the server (a decorator before any lookup, so a
refused user cannot probe which runs exist) and calls one function of ``ledger.operations``.
Those functions either change the ledger completely or raise and change nothing; the views turn
a refusal into the same form again with the message and the row's current state.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from ledger import selectors, transitions
from ledger.models import Run, Settlement, Step
from runs import presenting

View = Callable[..., HttpResponse]


def permission_any(*perms: str) -> Callable[[View], View]:
    """403 unless the signed-in user holds at least one of ``perms`` (use after login_required)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not any(request.user.has_perm(p) for p in perms):
                raise PermissionDenied(f"this needs one of the permissions {', '.join(perms)}")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def run_or_404(run_id: str) -> Run:
    try:
        return selectors.run_detail(run_id=run_id)
    except Run.DoesNotExist:
        raise Http404(f"no run {run_id!r}") from None


def step_or_404(run_id: str, pk: int) -> Step:
    try:
        return selectors.step_of_run(run_id=run_id, pk=pk)
    except Step.DoesNotExist:
        raise Http404(f"run {run_id!r} has no step #{pk}") from None


def settlement_or_404(pk: int) -> Settlement:
    try:
        return selectors.settlement_detail(pk=pk)
    except Settlement.DoesNotExist:
        raise Http404(f"no settlement #{pk}") from None


def refusal(exc: transitions.OperationError) -> dict[str, Any]:
    """Template context for a refused action: what was refused and, on a conflict, the row now.

    Status 409 for a conflict or a state that does not allow the action, 400 for bad input.
    """
    current = exc.current if isinstance(exc, transitions.Conflict) else {}
    return {
        "refused": str(exc),
        "conflict": isinstance(exc, transitions.Conflict),
        "current_text": presenting.pretty(current) if current else "",
        "status": 400 if isinstance(exc, transitions.InvalidInput) else 409,
    }
