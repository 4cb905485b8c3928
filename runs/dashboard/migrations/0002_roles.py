"""Create the dashboard's roles as groups, with their permissions.

Permissions are normally created after all migrations (post_migrate); this migration creates the
ones it needs itself so the groups are complete as soon as it has run. The role table is copied
here, not imported, so that the migration keeps meaning what it meant when it was written.
"""

from __future__ import annotations

from django.db import migrations

PERMISSIONS = {
    "view_dashboard": "Can read runs, ledgers and resume previews",
    "export_ledger": "Can view and download a run's whole ledger as JSON",
    "operate_runs": "Can resume, cancel and fork runs and propose settlements",
    "approve_settlements": "Can approve a settlement proposed by someone else",
}
ROLES = {
    "viewer": ["view_dashboard"],
    "operator": ["view_dashboard", "export_ledger", "operate_runs"],
    "approver": ["view_dashboard", "export_ledger", "approve_settlements"],
}


def create_roles(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    content_type, _ = ContentType.objects.get_or_create(app_label="runs", model="dashboard")
    perms = {}
    for codename, name in PERMISSIONS.items():
        perms[codename], _ = Permission.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
    for role, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.add(*(perms[c] for c in codenames))


def remove_roles(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
