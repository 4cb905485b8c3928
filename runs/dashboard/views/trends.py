"""The Trends page: runs over time by status, the blocked rate, and p50/p95 duration per agent
over 24 h and 7 d (``ledger.selectors.trends``), the chart drawn on the server as SVG (no
script, no CDN). Behind the login and ``runs.view_dashboard``; reads only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from ledger.selectors.trends import BUCKET_EDGES, STOPS, WINDOWS, Trend, run_trends
from ledger.selectors.usage import usage_by_agent
from runs.dashboard.http import HtmxHttpRequest, seen_teams
from runs.dashboard.models import VIEW_DASHBOARD

#: The chart's colours per status (darker than the badges' backgrounds: ≥ 3:1 on white).
FILL = {
    "succeeded": "#2e7d4f",
    "failed": "#b3261e",
    "cancelled": "#6b6b6b",
    "needs_attention": "#c25100",
}
WIDTH, HEIGHT, LEFT, TOP, BOTTOM = 720, 220, 44, 10, 34


@dataclass
class Bar:
    x: float
    width: float
    title: str
    parts: list[dict[str, Any]] = field(default_factory=list)
    tick: str = ""


def chart(trend: Trend) -> dict[str, Any]:
    """Stacked bars, one per bin, of the runs that stopped in it (by status); times in the
    reader's zone (the active one)."""
    peak = max((b.stopped for b in trend.bins), default=0) or 1
    slot = (WIDTH - LEFT - 4) / max(len(trend.bins), 1)
    plot = HEIGHT - TOP - BOTTOM
    every = max(len(trend.bins) // 6, 1)
    fmt = "%H:%M" if trend.window == "24h" else "%a %H:%M"
    bars = []
    for i, b in enumerate(trend.bins):
        local = timezone.localtime(b.start)
        counts = ", ".join(f"{b.entered.get(s, 0)} {s}" for s in STOPS)
        bar = Bar(
            x=round(LEFT + i * slot + 1, 1),
            width=round(max(slot - 2, 1), 1),
            title=f"{local:%Y-%m-%d %H:%M} {local.tzname()}: {counts}",
            tick=local.strftime(fmt) if i % every == 0 else "",
        )
        y = float(TOP + plot)
        for status in STOPS:
            n = b.entered.get(status, 0)
            if not n:
                continue
            h = plot * n / peak
            y -= h
            bar.parts.append({"y": round(y, 1), "height": round(h, 1), "fill": FILL[status]})
        bars.append(bar)
    return {
        "bars": bars,
        "peak": peak,
        "half": peak // 2 if peak >= 2 else None,
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "base": TOP + plot,
        "top": TOP,
        "mid": TOP + plot / 2,
        "tick_y": HEIGHT - BOTTOM + 16,
        "plot": plot,
        "legend": [(status.replace("_", " "), FILL[status]) for status in STOPS],
    }


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def trends(request: HtmxHttpRequest) -> HttpResponse:
    window = request.GET.get("window", "24h")
    refused = ""
    if window not in WINDOWS:
        refused = f"There is no window {window[:40]!r}: the windows are 24h and 7d."
        window = "24h"
    teams = seen_teams(request)
    trend = run_trends(window=window, now=timezone.now(), teams=teams)
    usage, usage_total = usage_by_agent(since=trend.since, until=trend.until, teams=teams)
    context = {
        "usage": usage,
        "usage_total": usage_total,
        "trend": trend,
        "chart": chart(trend),
        "windows": list(WINDOWS),
        "refused": refused,
        "edges": BUCKET_EDGES,
    }
    return render(request, "runs/trends.html", context, status=400 if refused else 200)
