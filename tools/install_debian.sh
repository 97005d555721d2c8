#!/usr/bin/env bash
# usage: install_debian.sh PACKAGE BINARY WHO
# A Debian package the tests need, installed with apt-get when BINARY is missing (Chromium for the
# browser tests, Prometheus and promtool for the alert tests): nothing downloads a binary of its
# own. Without apt-get, or without root, it says so in one line and exits 0 (WHO then skip with
# that reason), or 1 under CI=true, where no test may pass on a skip: `CI=true make test` then
# fails naming the package.
set -euo pipefail
PKG=$1
BIN=$2
WHO=$3
if [ -x "$BIN" ]; then
    exit 0
fi
cannot() {
    case "${CI:-}" in
        1|true|TRUE|True|yes)
            echo "$PKG: $BIN is missing and $1; $WHO need it (apt-get install $PKG, as root)" >&2
            exit 1;;
    esac
    echo "$PKG: $BIN is missing and $1: $WHO will skip" >&2
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
echo "$PKG: installing Debian's $PKG (apt-get)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$PKG" >/dev/null
test -x "$BIN" && echo "$PKG: $("$BIN" --version 2>&1 | head -n 1)" >&2
