#!/usr/bin/env bash
# Every test tier, from scratch:
#   0. the C sources in the committed .clang-format style;
#   1. the C core's unit tests, built with -Werror by gcc and by clang, and
#      under AddressSanitizer + UndefinedBehaviorSanitizer; the preload shim
#      built by both; the extension's sources checked by clang -Werror
#      against every CPython's headers;
#   2. for each CPython 3.9-3.14 on the machine (tools/pythons.sh): a fresh
#      virtual environment, `pip install .[test]` (the real wheel build), and
#      pytest, which runs real programs under the profiler;
#   2b. the accuracy tier (tests/accuracy): programs that measure their own
#      truth, run many times, on the oldest CPython and the newest with a GIL;
#   3. the shim built with UBSan, preloaded into real programs;
#   3b. the newest CPython with a build that pretends not to know its frame
#      layouts (what a release newer than calipers gets);
#   4. the HTML viewer in headless Chromium (Debian's chromium package,
#      installed here when missing; Playwright drives it, never downloads one).
# The export tests (tier 2) read pprof files with `go tool pprof`: Debian's
# golang-go, installed here when missing (the tests fail without it).
# Ends with one line "total: N passed, M failed"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
out=build/test
rm -rf build
mkdir -p "$out"
passed=0
failed=0
status=0

count() { # file -> adds its "N passed" / "N failed" numbers
    local p f
    p=$(grep -Eo '[0-9]+ passed' "$1" | tail -1 | grep -Eo '[0-9]+' || true)
    f=$(grep -Eo '[0-9]+ (failed|error|errors)' "$1" | tail -1 | grep -Eo '[0-9]+' || true)
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
}

run_tier() { # name, command...
    local name=$1 log="$out/$1.log"
    shift
    echo "== $name"
    if "$@" >"$log" 2>&1; then
        tail -n 3 "$log"
    else
        tail -n 60 "$log"
        echo "== $name FAILED (full log: $log)"
        status=1
        grep -Eq '[0-9]+ (failed|error)' "$log" || failed=$((failed + 1))
    fi
    count "$log"
}

if command -v clang-format >/dev/null 2>&1; then
    run_tier format-check sh -c "make -s format-check && echo '1 passed, 0 failed'"
else
    echo "clang-format not found: the format tier cannot run (install clang-format; .ci/run does)"
    failed=$((failed + 1))
fi

CC=${CC:-cc}
core_src="src/core/*.c"
run_tier c-core sh -c "$CC -std=c11 -O2 -Wall -Wextra -Werror -Isrc/core tests/c/test_core.c $core_src -lm -lpthread -ldl -o $out/test_core && $out/test_core"
run_tier c-core-sanitize sh -c "$CC -std=c11 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -Wall -Wextra -Werror -Isrc/core tests/c/test_core.c $core_src -lm -lpthread -ldl -o $out/test_core_asan && $out/test_core_asan"
run_tier c-heapgraph sh -c "$CC -std=c11 -O2 -Wall -Wextra -Werror -Isrc/core tests/c/test_heapgraph.c $core_src -lm -lpthread -ldl -o $out/test_heapgraph && $out/test_heapgraph"
run_tier c-heapgraph-sanitize sh -c "$CC -std=c11 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -Wall -Wextra -Werror -Isrc/core tests/c/test_heapgraph.c $core_src -lm -lpthread -ldl -o $out/test_heapgraph_asan && $out/test_heapgraph_asan"

pythons=$(tools/pythons.sh)
[ -n "$pythons" ] || { echo "no CPython 3.9-3.14 found"; exit 1; }

shim_src="src/shim/shim.c src/shim/redirect.c src/core/cal_bsamp.c src/core/cal_rand.c"
shim_flags="-std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden -fno-builtin -Isrc/core -Isrc/shim"
run_tier shim-gcc sh -c "$CC $shim_flags $shim_src -o $out/shim-gcc.so -ldl -lpthread -lm && echo '1 passed, 0 failed'"
if command -v clang >/dev/null 2>&1; then
    run_tier shim-clang sh -c "clang $shim_flags $shim_src -o $out/shim-clang.so -ldl -lpthread -lm && echo '1 passed, 0 failed'"
    run_tier c-core-clang sh -c "clang -std=c11 -O2 -Wall -Wextra -Werror -Isrc/core tests/c/test_core.c $core_src -lm -lpthread -ldl -o $out/test_core_clang && $out/test_core_clang"
    for py in $pythons; do
        inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
        v=$("$py" -c 'import sys, sysconfig; print("%d.%d" % sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))')
        run_tier "ext-clang-$v" sh -c "clang -std=c11 -fsyntax-only -Wall -Wextra -Werror -Isrc/core -Isrc/shim -I'$inc' src/ext/*.c && echo '1 passed, 0 failed'"
    done
else
    echo "clang not found: the clang tiers cannot run (install clang; .ci/run does)"
    failed=$((failed + 1))
fi
# `go tool pprof` reads the pprof exports in test_export.py.
if ! command -v go >/dev/null 2>&1; then
    echo "== installing Debian's golang-go for the pprof export tests"
    if [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go) >"$out/golang-install.log" 2>&1 || tail -5 "$out/golang-install.log"
    else
        sudo -n sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go' >"$out/golang-install.log" 2>&1 || tail -5 "$out/golang-install.log"
    fi
fi
for py in $pythons; do
    v=$("$py" -c 'import sys, sysconfig; print("%d.%d" % sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))')
    venv="build/venv-$v"
    run_tier "python-$v" sh -c "'$py' -m venv '$venv' && '$venv/bin/python' -m pip install -q --upgrade pip && '$venv/bin/python' -m pip install -q -Csetup-args=-Dwerror=true '.[test]' && cd tests && '../$venv/bin/python' -m pytest -q -p no:cacheprovider -m 'not browser and not unknown_layout and not accuracy'"
done

# The accuracy tier: programs that measure their own truth, each run many
# times (tests/accuracy), on the oldest Python and the newest with a GIL.
for py in $( (echo "$pythons" | head -n 1; echo "$pythons" | grep -v 't$' | tail -n 1) | sort -u); do
    v=$("$py" -c 'import sys, sysconfig; print("%d.%d" % sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))')
    run_tier "accuracy-$v" sh -c "cd tests && '../build/venv-$v/bin/python' -m pytest -q -p no:cacheprovider -m accuracy accuracy"
done

# The HTML viewer in a real browser, once (the page does not depend on the
# interpreter).  Chromium comes from Debian, not from Playwright's download.
if ! command -v chromium >/dev/null 2>&1; then
    echo "== installing Debian's chromium for the html tier"
    if [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >"$out/chromium-install.log" 2>&1 || tail -5 "$out/chromium-install.log"
    else
        sudo -n sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium' >"$out/chromium-install.log" 2>&1 || tail -5 "$out/chromium-install.log"
    fi
fi
first=$(echo "$pythons" | head -n 1)
fv=$("$first" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
run_tier html sh -c "'build/venv-$fv/bin/python' -m pip install -q -Csetup-args=-Dwerror=true '.[test,browser]' && cd tests && '../build/venv-$fv/bin/python' -m pytest -q -p no:cacheprovider -m browser --basetemp='../$out/html'"

# The shim built with UBSan, preloaded into real programs (first CPython).
run_tier shim-ubsan tools/shim-sanitize.sh "build/venv-$fv"

# An interpreter newer than the layouts calipers knows: the newest one here,
# built as if calipers stopped at the version before it.  It must build,
# install, run the program unchanged and say what it cannot profile.
last=$(echo "$pythons" | grep -v 't$' | tail -n 1)  # the newest with a GIL: the common build
lv=$("$last" -c 'import sys; print(sys.version_info[1])')
run_tier unknown-python sh -c "'$last' -m venv build/venv-unknown && build/venv-unknown/bin/python -m pip install -q -Csetup-args=-Dwerror=true '.[test]' -Csetup-args=-Dnewest_known_python=$((lv - 1)) && cd tests && ../build/venv-unknown/bin/python -m pytest -q -p no:cacheprovider -m unknown_layout"

# The sdist/wheel build path users and packagers take: python -m build, and
# the wheel holds the extension, the bootstrap and the schema.
py=$(echo "$pythons" | head -n 1)
run_tier wheel sh -c "'$py' -m venv build/venv-build && build/venv-build/bin/python -m pip install -q build && build/venv-build/bin/python -m build -q -Csetup-args=-Dwerror=true --outdir build/dist . && build/venv-build/bin/python tools/check-wheel.py --retag build/dist/*.whl"

echo "total: $passed passed, $failed failed"
[ "$failed" -eq 0 ] || status=1
exit $status
