"""The reader's own settings: the time zone every time of the dashboard is shown in
(``runs.dashboard.zones``). Any signed-in user with ``runs.view_dashboard`` sets their own."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from runs.dashboard import zones
from runs.dashboard.http import HtmxHttpRequest
from runs.dashboard.models import VIEW_DASHBOARD

#: Offered first in the field's list; any IANA name is accepted.
COMMON_ZONES = (
    "UTC", "Europe/London", "Europe/Paris", "Europe/Berlin", "America/New_York",
    "America/Chicago", "America/Los_Angeles", "America/Sao_Paulo", "Asia/Kolkata",
    "Asia/Tokyo", "Australia/Sydney",
)  # fmt: skip


class TimeZoneForm(forms.Form):
    time_zone = forms.CharField(
        label="Time zone",
        max_length=200,
        strip=True,
        help_text="An IANA name such as UTC, Europe/Paris or America/New_York.",
        widget=forms.TextInput(attrs={"list": "zones", "size": 30, "autocomplete": "off"}),
    )

    def clean_time_zone(self) -> str:
        name = str(self.cleaned_data.get("time_zone", ""))
        if error := zones.zone_error(name):
            raise forms.ValidationError(error)
        return name


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def preferences(request: HtmxHttpRequest) -> HttpResponse:
    current = zones.zone_of(request)
    if request.method == "POST":
        form = TimeZoneForm(request.POST)
        if form.is_valid():
            name = form.cleaned_data["time_zone"]
            zones.set_time_zone(request, name)
            messages.success(request, f"Times are now shown in {name}.")
            return redirect("runs:preferences")
        status = 400
    else:
        form = TimeZoneForm(initial={"time_zone": current})
        status = 200
    context = {
        "form": form,
        "current": current,
        "now": timezone.now(),
        "common": COMMON_ZONES,
        "all_zones": sorted(zones.known_zones() - set(COMMON_ZONES)),
    }
    return render(request, "runs/preferences.html", context, status=status)
