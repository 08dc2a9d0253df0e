"""tools/check-wheel.py, the wheel tier's check, on wheels made here from the
installed build's own binaries: each check must be able to fail, and
--retag must give a wheel the manylinux tag its binaries allow (and only
then)."""
import platform
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import calipers

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "tools" / "check-wheel.py"
PACKAGE = Path(calipers.__file__).parent
EXT = next(PACKAGE.glob("_calipers.*.so"))
LAUNCHER = Path(sys.executable).parent / "calipers"
ARCH = platform.machine()
PY = "cp%d%d" % sys.version_info[:2]
#: The ABI tag: cp314t on the free-threaded build.
ABI = PY + (sysconfig.get_config_var("abi_thread") or "")

METADATA = """Metadata-Version: 2.4
Name: calipers
Version: 0.1.0
License-Expression: MIT
License-File: LICENSE
Project-URL: Source, https://github.com/calipers-profiler/calipers

# calipers

See [the format](https://github.com/calipers-profiler/calipers/blob/main/docs/FORMAT.md).
"""


def make_wheel(directory, platform, extra=None, py=PY, metadata=METADATA, abi=ABI):
    """A wheel of the installed package tagged py-abi-platform; `extra` maps
    more archive names to files to add."""
    name = directory / ("calipers-0.1.0-%s-%s-%s.whl" % (py, abi, platform))
    files = {"calipers/" + p.relative_to(PACKAGE).as_posix(): p.read_bytes()
             for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    for arc, path in (extra or {}).items():
        files[arc] = Path(path).read_bytes()
    info = "calipers-0.1.0.dist-info/"
    files[info + "METADATA"] = metadata.encode()
    files[info + "WHEEL"] = ("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                             "Tag: %s-%s-%s\n" % (py, abi, platform)).encode()
    files["calipers-0.1.0.data/scripts/calipers-py"] = (ROOT / "src" / "scripts" /
                                                         "calipers-py").read_bytes()
    files["calipers-0.1.0.data/scripts/calipers"] = LAUNCHER.read_bytes()
    files[info + "licenses/LICENSE"] = (ROOT / "LICENSE").read_bytes()
    files[info + "RECORD"] = "".join("%s,,\n" % n for n in files).encode()
    with zipfile.ZipFile(name, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            z.writestr(arc, data)
    return name


def check(*args):
    r = subprocess.run([sys.executable, str(CHECK), *map(str, args)], capture_output=True,
                       text=True, timeout=60)
    assert re.search(r"^\d+ passed, \d+ failed$", r.stdout, re.M), r.stdout + r.stderr
    return r


def glibc_needed():
    """The newest GLIBC_x.y version the installed binaries need."""
    out = subprocess.run(["readelf", "-V", str(EXT), str(PACKAGE / "libcalipers_shim.so")],
                         capture_output=True, text=True, check=True).stdout
    return max(tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+\.\d+)", out))


def test_a_linux_tagged_wheel_fails_until_retagged(tmp_path):
    wheel = make_wheel(tmp_path, "linux_" + ARCH)
    r = check(wheel)
    assert r.returncode == 1
    assert "linux_%s is not a manylinux platform tag" % ARCH in r.stdout, r.stdout
    r = check("--retag", wheel)
    major, minor = max(glibc_needed(), (2, 17))
    want = "calipers-0.1.0-%s-%s-manylinux_%d_%d_%s.whl" % (PY, ABI, major, minor, ARCH)
    assert r.returncode == 0, r.stdout
    assert "retagged: %s" % want in r.stdout
    assert [p.name for p in tmp_path.glob("*.whl")] == [want]
    with zipfile.ZipFile(tmp_path / want) as z:
        assert "Tag: %s-%s-manylinux_%d_%d_%s" % (PY, ABI, major, minor, ARCH) in z.read(
            "calipers-0.1.0.dist-info/WHEEL").decode()
        assert z.read("calipers/libcalipers_shim.so") == (PACKAGE / "libcalipers_shim.so").read_bytes()


def test_a_tag_older_than_the_binaries_fails(tmp_path):
    major, minor = glibc_needed()
    if (major, minor) <= (2, 17):
        pytest.fail("built against glibc %d.%d: no older tag to try" % (major, minor))
    r = check(make_wheel(tmp_path, "manylinux_2_17_" + ARCH))
    assert r.returncode == 1
    assert "binaries need glibc %d.%d" % (major, minor) in r.stdout, r.stdout
    r = check(make_wheel(tmp_path, "manylinux_%d_%d_%s" % (major, minor, ARCH)))
    assert r.returncode == 0, r.stdout


def test_a_library_outside_the_policy_fails_and_is_not_retagged(tmp_path):
    # libextra.so, needed by a module in the wheel: no manylinux system has it.
    (tmp_path / "extra.c").write_text("int extra(void) { return 1; }\n")
    (tmp_path / "user.c").write_text("int extra(void);\nint user(void) { return extra(); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "libextra.so",
                    tmp_path / "extra.c"], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "user.so", tmp_path / "user.c",
                    "-L", tmp_path, "-lextra"], check=True)
    wheel = make_wheel(tmp_path, "linux_" + ARCH, {"calipers/user.so": tmp_path / "user.so"})
    r = check("--retag", wheel)
    assert r.returncode == 1
    assert "calipers/user.so needs libextra.so, which the manylinux policy does not allow" \
        in r.stdout, r.stdout
    assert "retagged" not in r.stdout and wheel.exists()


def test_the_interpreter_tag_must_be_the_extensions(tmp_path):
    other = "cp%d%d" % (sys.version_info[0], sys.version_info[1] + 1)
    major, minor = max(glibc_needed(), (2, 17))
    r = check(make_wheel(tmp_path, "manylinux_%d_%d_%s" % (major, minor, ARCH), py=other,
                         abi=other + ABI[len(PY):]))
    assert r.returncode == 1
    assert "the extension module is built for %s-%s" % (PY, ABI) in r.stdout, r.stdout


def test_metadata_licence_and_links(tmp_path):
    major, minor = max(glibc_needed(), (2, 17))
    tag = "manylinux_%d_%d_%s" % (major, minor, ARCH)
    bad = METADATA.replace("License-Expression: MIT\n", "").replace(
        "https://github.com/calipers-profiler/calipers/blob/main/docs/FORMAT.md", "docs/FORMAT.md")
    r = check(make_wheel(tmp_path, tag, metadata=bad))
    assert r.returncode == 1
    assert "METADATA has no License-Expression: MIT" in r.stdout
    assert "the README's links docs/FORMAT.md do not work on the package index" in r.stdout
