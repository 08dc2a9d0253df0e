# A task runner only: the build is meson-python (pyproject.toml, meson.build).
PYTHON ?= python3
VENV ?= .venv

.PHONY: demo install test test-c test-sanitize format format-check bench bench-quick clean

# Install calipers into $(VENV) and profile the example program.
demo: install
	$(VENV)/bin/calipers run -o examples/demo-profile.json examples/demo.py

install:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q .

# Build from scratch and run every test tier on every CPython 3.9-3.14 found.
test:
	tools/test-all.sh

# Only the C core's unit tests (plain, then ASan + UBSan).
test-c:
	cc -std=c11 -O2 -Wall -Wextra -Werror -Isrc/core tests/c/test_core.c src/core/*.c -lm -lpthread -ldl -o /tmp/calipers-test-core && /tmp/calipers-test-core
	cc -std=c11 -O2 -Wall -Wextra -Werror -Isrc/core tests/c/test_heapgraph.c src/core/*.c -lm -lpthread -ldl -o /tmp/calipers-test-heapgraph && /tmp/calipers-test-heapgraph
test-sanitize:
	cc -std=c11 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -Wall -Wextra -Werror -Isrc/core tests/c/test_core.c src/core/*.c -lm -lpthread -ldl -o /tmp/calipers-test-core-asan && /tmp/calipers-test-core-asan
	cc -std=c11 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -Wall -Wextra -Werror -Isrc/core tests/c/test_heapgraph.c src/core/*.c -lm -lpthread -ldl -o /tmp/calipers-test-heapgraph-asan && /tmp/calipers-test-heapgraph-asan

# The C sources in the committed .clang-format style (format-check is a
# tier of make test).
C_SOURCES = src/*/*.c src/*/*.h tests/c/*.c
format:
	clang-format -i $(C_SOURCES)
format-check:
	clang-format --dry-run --Werror $(C_SOURCES)

# Overhead, accuracy and own cost side by side with the peers (bench/README.md);
# e.g. make bench SUITE=overhead ONLY=raytrace,docutils REPEAT=5
BENCH_ARGS = $(if $(SUITE),--suite $(SUITE)) $(if $(ONLY),--only $(ONLY)) $(if $(REPEAT),--repeat $(REPEAT))
bench:
	$(PYTHON) bench/run.py $(BENCH_ARGS)
bench-quick:
	$(PYTHON) bench/run.py --quick $(BENCH_ARGS)

clean:
	rm -rf build builddir dist $(VENV) bench/.venv bench/.venv-* examples/demo-profile.json
