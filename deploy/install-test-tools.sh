#!/usr/bin/env bash
# The Debian tools the test suite checks the deployment files with: promtool (package
# prometheus) and systemd-analyze (package systemd). Installed when missing and when this runs
# as root with apt-get; otherwise the tests that need them say which is missing and skip.
set -euo pipefail
missing=()
command -v promtool >/dev/null || missing+=(prometheus)
command -v systemd-analyze >/dev/null || missing+=(systemd)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "test tools: ${missing[*]} missing (install as root; their tests skip)" >&2
    exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
