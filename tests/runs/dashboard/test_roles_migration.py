"""The roles migration, checked on the migrated database before any flush touches it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db]  # not transactional: as migrated


def test_the_roles_migration_created_groups_with_their_permissions() -> None:
    perms = {
        g.name: sorted(f"{p.content_type.app_label}.{p.codename}" for p in g.permissions.all())
        for g in Group.objects.all()
    }
    assert perms == {
        "viewer": ["runs.view_dashboard"],
        "operator": ["runs.export_ledger", "runs.operate_runs", "runs.view_dashboard"],
        "approver": ["runs.approve_settlements", "runs.export_ledger", "runs.view_dashboard"],
    }
