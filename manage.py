#!/usr/bin/env python
"""Django's command-line utility for runledger."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")
    from runs.cli import VERSION, print_version

    if sys.argv[1:] and sys.argv[1] in VERSION and len(sys.argv) == 2:
        print_version()  # runledger's, not Django's
        return
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
