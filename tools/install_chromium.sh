#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/browser): installed with apt-get when missing.
# Playwright drives this binary (executable_path); nothing downloads a browser of its own
# (never `playwright install`). Where it cannot be installed: tools/install_debian.sh.
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
exec "$BASH" "$here/install_debian.sh" chromium "${SPECNB_CHROMIUM:-/usr/bin/chromium}" "the browser tests"
