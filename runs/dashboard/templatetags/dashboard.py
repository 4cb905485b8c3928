"""Small formatting helpers for the dashboard's templates (plain text out; Django escapes it).

The template library ``dashboard`` (``{% load dashboard %}``), found by Django in the
dashboard app's ``templatetags`` package.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

from ledger.loops import transcript
from runs.dashboard.presenting import pretty_capped

register = template.Library()


def human_seconds(seconds: float) -> str:
    """A duration for people: 850 ms, 4.2 s, 3m 20s, 2h 5m, 4d 3h."""
    if seconds < 0:
        return "in " + human_seconds(-seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def coarse_age(seconds: float) -> str:
    """An age that changes at most once a minute, so a refreshed list rarely differs."""
    minutes = int(seconds // 60)
    if minutes < 1:
        return "< 1 min"
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


@register.simple_tag
def age(since: datetime | None, now: datetime) -> str:
    if since is None:
        return "—"
    return coarse_age((now - since).total_seconds())


@register.simple_tag
def since(moment: datetime | None, now: datetime) -> str:
    """'4.2 s ago' / 'in 20 s' at the precision of human_seconds."""
    if moment is None:
        return "—"
    delta = (now - moment).total_seconds()
    return human_seconds(delta) + (" ago" if delta >= 0 else "")


@register.filter
def duration(seconds: float | None) -> str:
    return "—" if seconds is None else human_seconds(seconds)


@register.filter
def short(value: str | None, length: int = 12) -> str:
    return (value or "")[:length]


@register.filter
def pretty(value: object) -> str:
    """JSON as indented text (capped; the template escapes it)."""
    return pretty_capped(value, limit=8000)


_BREAK_AFTER = re.compile(r"([:._/,\-])")


@register.filter(is_safe=True)
def breakable(value: object) -> str:
    """The text escaped, with a line-break opportunity (``<wbr>``) after each ``: . _ / , -``,
    so that keys and ids wrap at their own joints on a narrow screen, not mid-token."""
    text = escape("" if value is None else str(value))
    return mark_safe(_BREAK_AFTER.sub(r"\1<wbr>", text))


@register.simple_tag
def result_head(head: str | None, truncated: bool, url: str, pk: int) -> str:
    """A step's result head (``breakable``, ``…`` when cut) and its "expand" link, which swaps
    the whole result into ``#result-<pk>``; "—" when the step has no result."""
    if head is None:
        return mark_safe('<span class="muted">—</span>')
    more = "…" if truncated else ""
    url = escape(url)
    return mark_safe(  # head through breakable (escaped), url escaped, pk an int
        f'<code class="json head">{breakable(head)}{more}</code>\n'
        f'<a class="small expand" href="{url}"\n'
        f'   hx-get="{url}" hx-target="#result-{int(pk)}" hx-swap="innerHTML">expand</a>'
    )


@register.filter
def turn_anchor(step_id: str) -> str:
    """The step id of the tool-use loop turn a step belongs to, or "" (not a loop step)."""
    return transcript.turn_anchor(step_id or "")


@register.filter
def upto(p: Any) -> str:
    """A percentile read from a histogram (``selectors.trends.Percentile``): '≤ 25.0 s'."""
    if p is None:
        return "—"
    if p.upper is None:
        return "> " + human_seconds(p.lower)
    return "≤ " + human_seconds(p.upper)


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


@register.filter
def item(mapping: Any, key: Any) -> Any:
    """``mapping[key]``, or None (a template cannot index a dict by a variable)."""
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def usd(value: Any) -> str:
    """A cost in US dollars: '$0.0123' (4 decimals below a dollar, 2 above); '—' unknown."""
    if value is None:
        return "—"
    amount = float(value)
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


@register.filter
def tokens(value: int | None) -> str:
    """A token count, short: '812', '12.3k', '4.56M'."""
    if value is None:
        return "—"
    if value < 1000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.2f}M"
