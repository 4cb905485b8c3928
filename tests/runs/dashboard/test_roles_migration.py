"""The roles migration's groups. A transactional test's flush empties them, and with the suite
split over processes one may have run before this test in its process: the migration's own
function makes them again (it is idempotent: get or create), then they are read."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from tests.support.dashboard_runs import restore_roles

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db]  # not transactional: as migrated


def test_the_roles_migration_created_groups_with_their_permissions() -> None:
    restore_roles()
    perms = {
        g.name: sorted(f"{p.content_type.app_label}.{p.codename}" for p in g.permissions.all())
        for g in Group.objects.all()
    }
    assert perms == {
        "viewer": ["runs.view_dashboard"],
        "operator": ["runs.export_ledger", "runs.operate_runs", "runs.view_dashboard"],
        "approver": ["runs.approve_settlements", "runs.export_ledger", "runs.view_dashboard"],
    }
