#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/browser): installed with apt-get when missing.
# Playwright drives this binary (executable_path); nothing downloads a browser of its own
# (never `playwright install`). Without apt-get, or without root, it says so and exits 0:
# the browser tests then skip with that one reason.
set -euo pipefail
BIN=${SPECNB_CHROMIUM:-/usr/bin/chromium}
if [ -x "$BIN" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium: $BIN is missing and there is no apt-get here: the browser tests will skip" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "chromium: $BIN is missing and apt-get needs root: the browser tests will skip" >&2
        exit 0
    fi
fi
echo "chromium: installing Debian's chromium (apt-get)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
test -x "$BIN" && echo "chromium: $("$BIN" --version 2>/dev/null | head -n 1)" >&2
