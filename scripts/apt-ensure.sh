#!/usr/bin/env bash
# Installs the named Debian packages that are not installed yet. Quiet when
# everything is present, so make test stays fast on a warm machine.
set -euo pipefail
missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "apt-ensure: need root to install: ${missing[*]} (run as root, or install them yourself)" >&2
	exit 1
fi
echo "apt-ensure: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
