#!/usr/bin/env bash
# Prints one interpreter path per supported CPython minor version found on
# this machine (3.9 to 3.13): pyenv's installs first, then the PATH.
# PYTHONS="path ..." in the environment overrides the search.
set -u
if [ -n "${PYTHONS:-}" ]; then
    for p in $PYTHONS; do echo "$p"; done
    exit 0
fi
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
for v in 3.9 3.10 3.11 3.12 3.13; do
    found=""
    for d in $(ls -d "$root"/versions/"$v".* 2>/dev/null | sort -V -r); do
        if [ -x "$d/bin/python$v" ]; then found="$d/bin/python$v"; break; fi
    done
    if [ -z "$found" ] && command -v "python$v" >/dev/null 2>&1 && "python$v" -c '' 2>/dev/null; then
        found=$(command -v "python$v")
    fi
    [ -n "$found" ] && echo "$found"
done
exit 0
