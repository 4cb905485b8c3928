"""MkDocs hook: generate the configuration and command references from the code.

At build time it sets up Django with the project's own settings (``runs.settings``, with
``RUNLEDGER_VAR_DIR`` in a temporary directory so that nothing is written into the repository)
and adds two generated pages to the site — they are never files in git:

- ``reference/configuration.md`` from ``runs.settings.env.reference()``, the single declaration
  of every setting (name, section, kind, default, meaning);
- ``reference/commands.md`` from the management commands of the product's apps (app names
  starting with ``ledger`` or ``runs``), each with its help text and its argparse usage.

The build uses the defaults, whatever the environment of the person building says: the
variables that change which apps (and so which commands) are installed are removed first.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

CONFIGURATION = "reference/configuration.md"
COMMANDS = "reference/commands.md"

# Options every Django command has; listed once at the top of the page, hidden per command.
_DJANGO_OPTIONS = {
    "version",
    "verbosity",
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
}
# Environment that changes which apps are installed: the reference shows the defaults.
_INSTALL_VARIABLES = ("RUNLEDGER_HARNESS", "RUNLEDGER_EXAMPLES", "RUNLEDGER_AGENT_MODULES")
_PRODUCT_APPS = ("ledger", "runs")

_tmp: tempfile.TemporaryDirectory[str] | None = None


def _setup_django(root: Path) -> None:
    global _tmp
    import django
    from django.apps import apps

    if apps.ready:
        return
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    _tmp = tempfile.TemporaryDirectory(prefix="runledger-docs-")
    for name in _INSTALL_VARIABLES:
        os.environ.pop(name, None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "runs.settings"
    os.environ["RUNLEDGER_VAR_DIR"] = _tmp.name
    os.environ["COLUMNS"] = "96"  # argparse wraps the usage to this width: same output anywhere
    django.setup()


def on_config(config: Any) -> Any:
    _setup_django(Path(config.config_file_path).resolve().parent)
    return config


def on_files(files: Files, config: Any) -> Files:
    for src_uri, content in ((CONFIGURATION, configuration_page()), (COMMANDS, commands_page())):
        existing = files.get_file_from_path(src_uri)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, src_uri, content=content))
    return files


# --- configuration ---------------------------------------------------------------------------


def configuration_page() -> str:
    head = [
        "# Configuration reference",
        "",
        "Every setting is an environment variable, read once when a process starts. This page",
        "is generated at build time from the settings' single declaration, "
        "`runs.settings.env`, so it lists exactly what the code reads.",
        "",
    ]
    from runs.settings.env import reference

    sections: dict[str, list[Any]] = defaultdict(list)
    for setting in reference():
        sections[setting.section].append(setting)
    lines = list(head)
    lines += ["Sections: " + " · ".join(f"[{name}](#{_anchor(name)})" for name in sections), ""]
    # One block per setting, not a table: a name and its meaning read whole on a phone too.
    for section, settings in sections.items():
        lines += [f"## {section}", ""]
        for s in settings:
            default = s.default or "(empty)"
            lines += [
                f'<a id="{s.name.lower()}"></a>**`{s.name}`** · *{s.kind}* · default: {default}',
                "{: .setting }",
                "",
                s.doc,
                "{: .setting-meaning }",
                "",
            ]
    return "\n".join(lines)


def _anchor(title: str) -> str:
    # What MkDocs' toc extension makes of a heading (default slugify): lower case, words by -.
    from markdown.extensions.toc import slugify

    return slugify(title, "-")


# --- commands --------------------------------------------------------------------------------


def _product_commands() -> dict[str, list[str]]:
    from django.core.management import get_commands

    by_app: dict[str, list[str]] = defaultdict(list)
    for name, app in get_commands().items():
        if app.split(".")[0] in _PRODUCT_APPS:
            by_app[app].append(name)
    return {app: sorted(by_app[app]) for app in sorted(by_app)}


def _usage(app: str, name: str) -> tuple[str, str]:
    from django.core.management import load_command_class

    command = load_command_class(app, name)
    parser = command.create_parser("runledger", name)
    for action in parser._actions:
        if action.dest in _DJANGO_OPTIONS:
            action.help = argparse.SUPPRESS
    parser.description = None  # the help text is printed above the usage, once
    return str(command.help or "").strip(), parser.format_help().rstrip()


def commands_page() -> str:
    commands = _product_commands()
    lines = [
        "# Command reference",
        "",
        "Every management command of runledger's own apps, generated at build time from the",
        "commands themselves (their help text and their argument parsers). Run one as",
        "`runledger <command>` (the console script: the project's settings, from any directory)",
        "or as `python manage.py <command>` in the project directory, with the deployment's",
        "environment (`DATABASE_URL`, `CELERY_BROKER_URL`, …) set.",
        "",
        "Every command also takes Django's common options, left out below: `--verbosity`,",
        "`--settings`, `--pythonpath`, `--traceback`, `--no-color`, `--force-color`,",
        "`--skip-checks`, `--version`. The development equipment's commands (`killtest`, `soak`,",
        "the benchmarks, `seed_bulk`) exist only with `RUNLEDGER_HARNESS=1`; see",
        "[Development](../development/index.md).",
        "",
    ]
    for app, names in commands.items():
        lines += [f"## `{app}`", ""]
        for name in names:
            help_text, usage = _usage(app, name)
            lines += [f"### `{name}`", ""]
            if help_text:
                lines += [help_text, ""]
            lines += ["```text", usage, "```", ""]
    return "\n".join(lines)
