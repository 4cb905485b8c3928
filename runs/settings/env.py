"""The one environment helper of the project's settings, and the declarations it keeps.

Every environment variable the project reads is read here, with its type, default and meaning::

    DEBUG = env.bool("DEBUG", False, section=WEB, doc="Django's debug mode ...")

A name is declared once: reading it again with another default or meaning is an error. The
ledger app's own settings are declared in ``ledger.conf`` (read through ``ledger.conf.conf``);
``reference()`` lists both, and the documentation's configuration reference is generated from it.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ledger import conf as ledger_conf

T = TypeVar("T")


@dataclass(frozen=True)
class Declared:
    """One row of the configuration reference."""

    name: builtins.str
    section: builtins.str
    kind: builtins.str
    default: builtins.str  # as a person reads it
    doc: builtins.str


_DECLARED: builtins.dict[builtins.str, Declared] = {}


def declare(
    name: builtins.str,
    *,
    section: builtins.str,
    kind: builtins.str,
    default: builtins.str,
    doc: builtins.str,
) -> None:
    """Record ``name`` (without reading it): for variables read outside the settings, such as
    ``gunicorn_conf``'s or the ``serve`` command's. Declaring it twice differently is an error."""
    row = Declared(name, section, kind, default, " ".join(doc.split()))
    if not row.doc:
        raise ValueError(f"{name}: a setting needs a meaning")
    if name in ledger_conf.DECLARED:
        raise ValueError(f"{name} is a ledger setting, declared in ledger.conf")
    known = _DECLARED.setdefault(name, row)
    if known != row:
        raise ValueError(f"{name} is declared twice, differently: {known} and {row}")


def _read(
    name: builtins.str,
    default: T,
    parse: Callable[[builtins.str], T],
    *,
    kind: builtins.str,
    section: builtins.str,
    doc: builtins.str,
    shown: builtins.str | None,
) -> T:
    declare(name, section=section, kind=kind, default=_shown(default, shown), doc=doc)
    text = os.environ.get(name)
    if text is None or (text == "" and kind != "str"):
        return default
    try:
        return parse(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a valid {kind}") from None


def _shown(default: Any, shown: builtins.str | None) -> builtins.str:
    if shown is not None:
        return shown
    if isinstance(default, builtins.bool):
        return "on" if default else "off"
    if isinstance(default, builtins.list):
        return ", ".join(default) if default else "(empty)"
    return builtins.str(default) if default != "" else "(empty)"


def str(
    name: builtins.str,
    default: builtins.str,
    *,
    section: builtins.str,
    doc: builtins.str,
    shown: builtins.str | None = None,
) -> builtins.str:
    return _read(name, default, lambda t: t, kind="str", section=section, doc=doc, shown=shown)


def bool(
    name: builtins.str,
    default: builtins.bool,
    *,
    section: builtins.str,
    doc: builtins.str,
    shown: builtins.str | None = None,
) -> builtins.bool:
    return _read(
        name,
        default,
        lambda t: t.strip().lower() in ledger_conf.TRUE,
        kind="bool",
        section=section,
        doc=doc,
        shown=shown,
    )


def int(
    name: builtins.str,
    default: builtins.int,
    *,
    section: builtins.str,
    doc: builtins.str,
    shown: builtins.str | None = None,
) -> builtins.int:
    return _read(name, default, builtins.int, kind="int", section=section, doc=doc, shown=shown)


def float(
    name: builtins.str,
    default: builtins.float,
    *,
    section: builtins.str,
    doc: builtins.str,
    shown: builtins.str | None = None,
) -> builtins.float:
    return _read(name, default, builtins.float, kind="float", section=section, doc=doc, shown=shown)


def list(
    name: builtins.str,
    default: builtins.list[builtins.str],
    *,
    section: builtins.str,
    doc: builtins.str,
    shown: builtins.str | None = None,
) -> builtins.list[builtins.str]:
    def parse(text: builtins.str) -> builtins.list[builtins.str]:
        return [item.strip() for item in text.split(",") if item.strip()]

    return _read(name, default, parse, kind="list", section=section, doc=doc, shown=shown)


def path(
    name: builtins.str,
    default: Path,
    *,
    section: builtins.str,
    doc: builtins.str,
    shown: builtins.str | None = None,
) -> Path:
    return _read(name, default, Path, kind="path", section=section, doc=doc, shown=shown)


def reference() -> builtins.list[Declared]:
    """Every setting, the project's and the ledger's, in sections (the generated reference)."""
    rows = [
        *_DECLARED.values(),
        *(
            Declared(s.name, s.section, s.kind, s.shown_default(), " ".join(s.doc.split()))
            for s in ledger_conf.SETTINGS
        ),
    ]
    return sorted(rows, key=lambda r: (r.section, r.name))


def declared_names() -> set[builtins.str]:
    return set(_DECLARED) | set(ledger_conf.DECLARED)
