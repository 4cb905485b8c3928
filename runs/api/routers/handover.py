"""Handover: who is on a run, taking it ("on it"), releasing it, and the notes on it, as the
run page's "On it" box does (``ledger.transitions.handover``; every change audited as the
token's person or ``api:<name>``)."""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import Field

from ledger import transitions
from ledger.selectors.handover import handover_of, run_notes
from ledger.transitions.handover import MAX_NOTE_CHARS, run_note, run_release, run_take
from runs.api import problems
from runs.api.auth import actor, require
from runs.api.routers.runs import REFUSALS, run_or_404
from runs.api.schemas import Strict

router = Router(tags=["handover"])
NOTES_SHOWN = 50


class NoteOut(Schema):
    id: int
    by: str
    at: datetime
    text: str


class HandoverOut(Schema):
    run_id: str
    taken_by: str = Field(description="who is on the run ('' for nobody)")
    taken_at: datetime | None
    notes: list[NoteOut] = Field(description=f"the newest {NOTES_SHOWN} notes, newest first")


class TakeIn(Strict):
    seen_holder: str = Field(
        default="",
        max_length=150,
        description="who you saw on the run ('' for nobody); taking a run held by anyone else "
        "is refused (409), so a take-over is deliberate",
    )


class NoteIn(Strict):
    text: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)
    key: str = Field(
        default="",
        max_length=64,
        description="your key for this note: the same key again on this run is the same note",
    )


def _out(run_id: str) -> HandoverOut:
    handover = handover_of(run_id=run_id)
    notes = [
        NoteOut(id=n.pk, by=n.actor, at=n.at, text=n.reason)
        for n in run_notes(run_id=run_id)[:NOTES_SHOWN]
    ]
    return HandoverOut(
        run_id=run_id,
        taken_by=handover.taken_by if handover else "",
        taken_at=handover.taken_at if handover else None,
        notes=notes,
    )


@router.get("/runs/{run_id}/handover", response={200: HandoverOut, **REFUSALS}, summary="On it")
def get_handover(request: HttpRequest, run_id: str) -> HandoverOut:
    """Who is on the run, and its notes."""
    require(request, "read")
    return _out(run_or_404(request, run_id).run_id)


@router.post("/runs/{run_id}/take", response={200: HandoverOut, **REFUSALS}, summary="Take")
def take(request: HttpRequest, run_id: str, body: TakeIn) -> HandoverOut:
    """Be on the run from now on (a repeat changes nothing)."""
    token = require(request, "operate")
    run = run_or_404(request, run_id, "operate")
    try:
        run_take(run_id=run.run_id, by=actor(token), seen_holder=body.seen_holder)
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return _out(run.run_id)


@router.post("/runs/{run_id}/release", response={200: HandoverOut, **REFUSALS}, summary="Release")
def release(request: HttpRequest, run_id: str) -> HandoverOut:
    """Nobody is on the run any more (only its holder releases it)."""
    token = require(request, "operate")
    run = run_or_404(request, run_id, "operate")
    try:
        run_release(run_id=run.run_id, by=actor(token))
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return _out(run.run_id)


@router.post("/runs/{run_id}/notes", response={200: HandoverOut, **REFUSALS}, summary="Note")
def note(request: HttpRequest, run_id: str, body: NoteIn) -> HandoverOut:
    """Leave a note on the run (idempotent by ``key``)."""
    token = require(request, "operate")
    run = run_or_404(request, run_id, "operate")
    try:
        run_note(run_id=run.run_id, by=actor(token), text=body.text, key=body.key)
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return _out(run.run_id)
