"""Checks that a built wheel holds everything calipers needs at run time.
Prints "N passed, M failed"; exits non-zero on failure."""
import sys
import zipfile

REQUIRED = [
    ("calipers/__init__.py", None),
    ("calipers/cli.py", None),
    ("calipers/_agent.py", None),
    ("calipers/_boot/sitecustomize.py", None),
    ("calipers/schema/calipers-1.schema.json", None),
    ("calipers/_calipers.", ".so"),
    ("calipers/libcalipers_shim.so", None),
]

names = zipfile.ZipFile(sys.argv[1]).namelist()
passed = failed = 0
for prefix, suffix in REQUIRED:
    ok = any(n.startswith(prefix) and (suffix is None or n.endswith(suffix)) for n in names)
    if ok:
        passed += 1
    else:
        failed += 1
        print("missing from the wheel: %s*%s" % (prefix, suffix or ""))
entry = [n for n in names if n.endswith("entry_points.txt")]
if entry and b"calipers = calipers.cli:main" in zipfile.ZipFile(sys.argv[1]).read(entry[0]):
    passed += 1
else:
    failed += 1
    print("the wheel declares no calipers console script")
# The preload shim must load into any process: it may not need libpython.
wheel = zipfile.ZipFile(sys.argv[1])
shim = [n for n in names if n.endswith("libcalipers_shim.so")]
if shim:
    import re
    data = wheel.read(shim[0])
    if re.search(rb"libpython[0-9.]*\.so", data):
        failed += 1
        print("the shim links libpython")
    else:
        passed += 1
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
