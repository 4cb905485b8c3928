"""The Django admin's user page with the person's team roles (``TeamRole``) inline: admins
(superusers) only see and change them, and every change goes through
``runs.dashboard.teams.set_team_role`` (audited as ``team_role``), never a bare save."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import AdminSplitDateTime
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.db.models import Model
from django.forms import BaseInlineFormSet
from django.http import HttpRequest

from ledger.admin import LabelledSplitDateTime
from ledger.teams import is_team
from runs.dashboard.models import TeamRole
from runs.dashboard.teams import set_team_role


class TeamRoleForm(forms.ModelForm):
    class Meta:
        model = TeamRole
        fields = ("team", "role")
        # A tabular inline names its columns in the table's head only: each box gets its own.
        widgets = {
            "team": forms.TextInput(attrs={"aria-label": "team"}),
            "role": forms.Select(attrs={"aria-label": "role in this team"}),
        }

    def clean_team(self) -> str:
        team = str(self.cleaned_data.get("team", ""))
        if not is_team(team):
            raise forms.ValidationError(
                "a team is 1 to 63 characters from a-z 0-9 _ - starting with a letter or a digit"
            )
        return team


class TeamRoleFormSet(BaseInlineFormSet):
    def add_fields(self, form: Any, index: int | None) -> None:
        super().add_fields(form, index)
        if "DELETE" in form.fields:  # the table's head names it; the box gets its own name
            form.fields["DELETE"].widget.attrs["aria-label"] = "remove this role"


class TeamRoleInline(admin.TabularInline):
    """A person's role in each team (beside their groups, which hold in every team)."""

    model = TeamRole
    form = TeamRoleForm
    formset = TeamRoleFormSet
    extra = 0
    fields = ("team", "role", "source")
    readonly_fields = ("source",)
    verbose_name = "role in a team"
    verbose_name_plural = "roles in teams (a group above holds in every team)"

    def _admin(self, request: HttpRequest) -> bool:
        return bool(getattr(request.user, "is_superuser", False))

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._admin(request)

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._admin(request)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._admin(request)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._admin(request)


class TeamUserAdmin(UserAdmin):
    inlines = [*UserAdmin.inlines, TeamRoleInline]
    # Plain labelled multi-selects: the two-box widget's help icons fail axe (aria-prohibited).
    filter_horizontal = ()

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if field is not None and isinstance(field.widget, AdminSplitDateTime):
            # Django's date and time boxes, each named for a screen reader.
            field.widget = LabelledSplitDateTime(str(db_field.verbose_name))
        return field

    def save_formset(
        self, request: HttpRequest, form: Any, formset: BaseInlineFormSet, change: bool
    ) -> None:
        if formset.model is not TeamRole:
            super().save_formset(request, form, formset, change)
            return
        person = form.instance
        by = request.user.get_username()
        why = "changed in the admin"
        kept = formset.save(commit=False)
        for row in formset.deleted_objects:
            set_team_role(user=person, team=row.team, role=None, by=by, reason=why)
        for row in kept:
            if row.pk is not None:
                # A row moved to another team: the old team's role goes, the new one comes.
                old = TeamRole.objects.filter(pk=row.pk).values_list("team", flat=True).first()
                if old is not None and old != row.team:
                    set_team_role(user=person, team=old, role=None, by=by, reason=why)
            set_team_role(user=person, team=row.team, role=row.role, by=by, reason=why)


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, TeamUserAdmin)
