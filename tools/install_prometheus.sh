#!/usr/bin/env bash
# Debian's prometheus (it brings promtool) for the alert tests: `promtool check rules` and
# `promtool test rules` on what `specnb alerts` writes, and a real Prometheus (127.0.0.1 only)
# scraping a real vLLM-CPU server. Where it cannot be installed: tools/install_debian.sh.
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
exec "$BASH" "$here/install_debian.sh" prometheus "${SPECNB_PROMTOOL:-/usr/bin/promtool}" "the alert tests"
