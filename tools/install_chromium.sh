#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/browser): installed with apt-get when missing.
# Playwright drives this binary (executable_path); nothing downloads a browser of its own
# (never `playwright install`). Without apt-get, or without root, it says so in one line and
# exits 0 (the browser tests then skip with that reason), or 1 under CI=true, where no test may
# pass on a skip: `CI=true make test` then fails naming chromium.
set -euo pipefail
BIN=${SPECNB_CHROMIUM:-/usr/bin/chromium}
if [ -x "$BIN" ]; then
    exit 0
fi
cannot() {
    case "${CI:-}" in
        1|true|TRUE|True|yes)
            echo "chromium: $BIN is missing and $1; the browser tests need it (apt-get install chromium, as root)" >&2
            exit 1;;
    esac
    echo "chromium: $BIN is missing and $1: the browser tests will skip" >&2
    exit 0
}
if ! command -v apt-get >/dev/null 2>&1; then
    cannot "there is no apt-get here"
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        cannot "apt-get needs root"
    fi
fi
echo "chromium: installing Debian's chromium (apt-get)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
test -x "$BIN" && echo "chromium: $("$BIN" --version 2>/dev/null | head -n 1)" >&2
