#!/usr/bin/env bash
# The CPythons kiln is built and tested for besides the main one (python3,
# 3.11): one interpreter path per line, for 3.10, 3.12 and 3.13, found as
# python3.X on PATH or under pyenv. A version not found is left out (CI's
# machines have all of them; `make test` says which it ran).
set -euo pipefail
for v in 3.10 3.12 3.13; do
  p=""
  # pyenv's own install first: its shim on PATH only runs the active version.
  for d in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*; do
    [ -x "$d/bin/python$v" ] && p="$d/bin/python$v"
  done
  if [ -z "$p" ] && q=$(command -v "python$v" 2>/dev/null) && "$q" -c "" 2>/dev/null; then p="$q"; fi
  [ -n "$p" ] && echo "$p"
done
exit 0
