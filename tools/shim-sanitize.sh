#!/usr/bin/env bash
# The preload shim built with UndefinedBehaviorSanitizer, preloaded into real
# programs under `calipers run` (native pthreads that malloc/realloc/free,
# fork, NumPy, worker threads, leaks, copies).  Not AddressSanitizer: its
# runtime must come first in the preload list and then itself replaces
# malloc, so the shim would be shadowed (or, placed first, run before the
# runtime is initialised).  Memory errors in the shim are checked with
# valgrind instead (docs/INTERNALS.md, "Testing the shim").
# Usage: tools/shim-sanitize.sh VENV   (a venv with calipers[test] installed)
# Prints "N passed, M failed".
set -u
venv=$1
out=build/test/shim-ubsan
mkdir -p "$out"
cc -std=c11 -O1 -g -fno-omit-frame-pointer -fsanitize=undefined -fno-sanitize-recover=all \
    -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden -fno-builtin -ftls-model=initial-exec \
    -Isrc/core -Isrc/shim src/shim/shim.c src/shim/redirect.c src/core/cal_bsamp.c src/core/cal_rand.c -o "$out/shim.so" -ldl -lpthread -lm || exit 1
cc -O1 -shared -fPIC -pthread tests/programs/churn.c -o "$out/libchurn.so" || exit 1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
passed=0
failed=0
for args in "native_threads.py $out/libchurn.so" "volumes.py $out/truth.json" "leaks.py leak" \
            "copies.py $out/copies.json" "mem_threads.py"; do
    set -- $args
    prog=tests/programs/$1
    shift
    if CALIPERS_SHIM="$out/shim.so" "$venv/bin/python" -m calipers run --no-report -o "$out/profile.json" "$prog" "$@" \
        && "$venv/bin/python" -c "import json,sys; m=json.load(open(sys.argv[1]))['summary']['memory']; sys.exit(m is None)" "$out/profile.json"; then
        passed=$((passed + 1))
    else
        echo "FAILED under the sanitized shim: $args"
        failed=$((failed + 1))
    fi
done
# The same shim loaded by calipers.profile() without preload, its GOT
# redirection on and off around a dlopen'ed library (tests/programs/hold.c).
cc -O1 -shared -fPIC -fno-plt -Wl,-z,relro,-z,now tests/programs/hold.c -o "$out/libhold.so" || exit 1
if env -u LD_PRELOAD CALIPERS_SHIM="$out/shim.so" "$venv/bin/python" tests/programs/inprocess_stop.py \
        "$out/libhold.so" "$out/truth.json" "$out/profile.json" > /dev/null \
    && "$venv/bin/python" -c "import json,sys; m=json.load(open(sys.argv[1]))['summary']['memory']; sys.exit(not m['allocated_native_bytes'])" "$out/profile.json"; then
    passed=$((passed + 1))
else
    echo "FAILED under the sanitized shim: inprocess_stop.py (no preload)"
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
