#!/usr/bin/env bash
# Fails, listing the offenders, when libejk exports anything but its API: C symbols named ejk_*,
# and C++ symbols of namespace ejk outside its internal namespaces (typeinfo and vtables of
# such classes included). Anything of std:: is an offender: exported, it binds to a host
# process's own copy (PyTorch's), which crashed there.
# Usage: test_exports.sh path/to/libejk.so
set -euo pipefail
lib=$1
internal='detail|engine|cuda|cache|jit|util|generated|gen|cpu|ops'

# "value type name" per line; the name is the last field.
mapfile -t names < <(nm -D --defined-only "$lib" | awk '{print $NF}')

# The public API's symbols are ejk_* (C) and, mangled, _ZN3ejk (nested names), _ZNK3ejk (const
# members), _ZT{I,S,V}N3ejk (typeinfo, its name, vtable), followed by the first name under ejk::.
ours() {
  local s=$1
  [[ $s == ejk_* ]] && return 0
  [[ $s =~ ^_Z(N|NK|TIN|TSN|TVN)3ejk([0-9]+)(.*)$ ]] || return 1
  local first=${BASH_REMATCH[3]:0:${BASH_REMATCH[2]}}
  [[ ! $first =~ ^($internal)$ && $first != _GLOBAL__N* ]]
}

offenders=()
for s in "${names[@]}"; do
  ours "$s" || offenders+=("$s")
done

echo "libejk exports ${#names[@]} symbols: $(basename "$lib")"
if [ ${#offenders[@]} -ne 0 ]; then
  echo "FAIL: ${#offenders[@]} exported symbols are not libejk's API (not ejk_* nor ejk:: outside"
  echo "ejk::{${internal//|/,}}); mark only the API EJK_API (runtime/include/ejk/export.h):"
  printf '%s\n' "${offenders[@]}" | c++filt | sort | sed 's/^/  /' | head -200
  [ ${#offenders[@]} -le 200 ] || echo "  ... and $(( ${#offenders[@]} - 200 )) more"
  exit 1
fi
echo "ok: every exported symbol is libejk's API"
