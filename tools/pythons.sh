#!/usr/bin/env bash
# Prints one interpreter path per supported CPython minor version found on
# this machine (3.9 to 3.14, and 3.14t, the free-threaded build): pyenv's installs first, then the PATH, then
# the builds of the project's CPython build script (its cache directory,
# $CALIPERS_PYTHONS or ~/.cache/calipers-pythons; see tools/get-python314.sh).
# PYTHONS="path ..." in the environment overrides the search.
set -u
if [ -n "${PYTHONS:-}" ]; then
    for p in $PYTHONS; do echo "$p"; done
    exit 0
fi
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
built=${CALIPERS_PYTHONS:-${HOME:-/tmp}/.cache/calipers-pythons}
for v in 3.9 3.10 3.11 3.12 3.13 3.14; do
    found=""
    for d in $(ls -d "$root"/versions/"$v".* "$built"/"$v".* 2>/dev/null | grep -v 't$' | sort -V -r); do
        if [ -x "$d/bin/python$v" ] && "$d/bin/python$v" -c '' 2>/dev/null; then found="$d/bin/python$v"; break; fi
    done
    if [ -z "$found" ] && command -v "python$v" >/dev/null 2>&1 && "python$v" -c '' 2>/dev/null; then
        found=$(command -v "python$v")
    fi
    [ -n "$found" ] && echo "$found"
done
# The free-threaded build (3.14t, no GIL), when the build script made one.
for d in $(ls -d "$built"/3.14.*t 2>/dev/null | sort -V -r); do
    if [ -x "$d/bin/python3.14t" ] && "$d/bin/python3.14t" -c '' 2>/dev/null; then echo "$d/bin/python3.14t"; break; fi
done
exit 0
