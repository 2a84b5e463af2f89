#!/usr/bin/env bash
# Installs the Debian packages ejkernel builds with. Idempotent: does nothing when all are there.
# Debian 12 (bookworm); Catch2 3 comes from bookworm-backports (bookworm itself has Catch2 2).
set -euo pipefail

PKGS=(build-essential cmake ninja-build git python3 python3-venv
      llvm-19-dev libclang-19-dev libclang-cpp19-dev clang-19 libclang-common-19-dev
      libyaml-cpp-dev nlohmann-json3-dev libfmt-dev libcli11-dev libzstd-dev libxxhash-dev)
BACKPORTS_PKGS=(libcatch2-dev)

missing=()
for p in "${PKGS[@]}" "${BACKPORTS_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "setup-deps: installing ${missing[*]}" >&2
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
if [ "$codename" = bookworm ] && ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "deb http://deb.debian.org/debian bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/ejk-backports.list >/dev/null
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
if [ "$codename" = bookworm ]; then
  $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports "${BACKPORTS_PKGS[@]}" >/dev/null
else
  $SUDO apt-get install -y -qq --no-install-recommends "${BACKPORTS_PKGS[@]}" >/dev/null
fi
