#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's Chromium package (Playwright never downloads a
# browser here). Install it when it is missing; `make test` runs this first.
set -euo pipefail
CHROMIUM="${RUNLEDGER_CHROMIUM:-/usr/bin/chromium}"
[ -x "$CHROMIUM" ] && exit 0
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "ensure_chromium: $CHROMIUM is missing and there is no sudo to install it (apt-get install chromium)" >&2; exit 1; }
  SUDO="sudo"
fi
echo "ensure_chromium: installing Debian's chromium package" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
