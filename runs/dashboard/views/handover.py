"""Handover on the run page: take a run ("on it"), take it over, release it, leave a note
(``ledger.transitions.handover``: each audited). Operators and approvers act; everyone who can
read the run sees who is on it and the notes.

An htmx request gets the handover box again (``runs/partials/handover.html``); a plain form
post is redirected to the run page, or — refused — gets the box on a page of its own with what
was refused and the note as typed (nothing is lost).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from ledger import transitions
from ledger.models import Run
from ledger.transitions.handover import run_note, run_release, run_take
from runs.dashboard.handover import HAND, handover_context
from runs.dashboard.http import HtmxHttpRequest, permission_any, run_for


def _answer(
    request: HtmxHttpRequest, run: Run, *, said: str = "", status: int = 200, **extra: Any
) -> HttpResponse:
    if status == 200 and not request.htmx:
        if said:
            messages.success(request, said)
        return redirect(reverse("runs:detail", args=[run.run_id]) + "#handover")
    context = {"run": run, **handover_context(request, run, said=said, **extra)}
    template = "runs/partials/handover.html" if request.htmx else "runs/handover.html"
    return render(request, template, context, status=status)


def _refused(request: HtmxHttpRequest, run: Run, exc: transitions.OperationError, **extra: Any):
    status = 400 if isinstance(exc, transitions.InvalidInput) else 409
    return _answer(request, run, status=status, refused=str(exc), **extra)


@require_POST
@login_required
@permission_any(*HAND)
def take(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = run_for(request, run_id, perm=HAND)
    if "seen_holder" not in request.POST:
        # The page's form always says whom it showed holding the run (empty: nobody); a POST
        # without it did not come from that form, and takes nothing.
        exc = transitions.InvalidInput("the form must say who you saw on the run (seen_holder)")
        return _refused(request, run, exc)
    seen = str(request.POST.get("seen_holder", ""))[:150]
    try:
        _handover, changed = run_take(run_id=run.run_id, by=request.user, seen_holder=seen)
    except transitions.OperationError as exc:
        return _refused(request, run, exc)
    if not changed:
        return _answer(request, run, said="You are on this run already: nothing changed.")
    said = f"You are on it{f' (taken over from {seen})' if seen else ''}."
    return _answer(request, run, said=said)


@require_POST
@login_required
@permission_any(*HAND)
def release(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = run_for(request, run_id, perm=HAND)
    try:
        run_release(run_id=run.run_id, by=request.user)
    except transitions.OperationError as exc:
        return _refused(request, run, exc)
    return _answer(request, run, said="Released: nobody is on this run now.")


@require_POST
@login_required
@permission_any(*HAND)
def note(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = run_for(request, run_id, perm=HAND)
    text = str(request.POST.get("note", ""))
    key = str(request.POST.get("key", ""))
    try:
        _event, new = run_note(run_id=run.run_id, by=request.user, text=text, key=key)
    except transitions.OperationError as exc:
        return _refused(request, run, exc, note_text=text, note_key=key or None)
    return _answer(request, run, said="Note left." if new else "That note is there already.")
