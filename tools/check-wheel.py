"""Checks that a built wheel holds everything calipers needs at run time and
may carry the manylinux tag it has.

usage: check-wheel.py [--retag] WHEEL

Contents: the package's files, the `calipers` launcher and the
`calipers-py` script, LICENSE and the licence and project URLs in the
metadata.  Binaries (the manylinux policy,
PEP 600, as auditwheel applies it): every ELF file in the wheel is for the
tag's architecture, needs only libraries every manylinux system has (the
policy's list; the dynamic loader), no symbol version newer than the tag's
glibc, and none of the symbols the policy forbids; the preload shim needs
no libpython (it must load into any process).  Tag: the file name's and
the WHEEL file's agree, the platform is manylinux_X_Y_ARCH (or a legacy
alias) with X.Y at least the newest glibc version the binaries need, and
the interpreter tag is the extension module's.

meson-python tags the wheels it builds linux_ARCH.  With --retag such a
wheel, if its binaries pass, is replaced by the same wheel tagged
manylinux_X_Y_ARCH for the oldest glibc they allow (at least 2.17), as
`auditwheel repair` would do for a wheel that needs no library copied in;
then that wheel is checked.

Prints one line per problem and "N passed, M failed"; exits non-zero on
failure."""
import base64
import hashlib
import os
import re
import struct
import sys
import zipfile

# ---- the manylinux policy ---------------------------------------------------

#: Libraries a manylinux wheel may need (auditwheel's manylinux policy; the
#: same list for every manylinux_2_17 and later tag).  The dynamic loader
#: (ld-linux*.so.*, ld64.so.*) is always allowed.
ALLOWED_LIBS = {
    "libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libanl.so.1",
    "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1",
    "libpthread.so.0", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6",
    "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0",
    "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1",
}
LOADER = re.compile(r"^(ld-linux[-\w.]*\.so\.\d+|ld64\.so\.\d+)$")

#: Symbols the policy forbids even from allowed libraries (they are missing
#: from, or broken in, the glibc of older manylinux systems).
FORBIDDEN_SYMBOLS = {
    "__cxa_thread_atexit_impl", "__issignaling", "__issignalingf", "__issignalingl",
    "pthread_getattr_default_np", "pthread_setattr_default_np",
}

#: The newest version of the other versioned ABIs manylinux_2_17 (the
#: oldest tag this check gives) allows, on every architecture.  calipers is
#: C and needs none of them; a wheel that does needs auditwheel's tables.
OTHER_ABI_MAX = {"GCC": (4, 7, 0), "GLIBCXX": (3, 4, 19), "CXXABI": (1, 3, 7)}

LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}

#: ELF e_machine -> the architecture in wheel tags (ppc64 by byte order).
MACHINES = {3: "i686", 62: "x86_64", 183: "aarch64", 40: "armv7l", 22: "s390x",
            243: "riscv64", 258: "loongarch64"}

REQUIRED = [
    ("calipers/__init__.py", None),
    ("calipers/cli.py", None),
    ("calipers/_agent.py", None),
    ("calipers/_common.py", None),
    ("calipers/memory.py", None),
    ("calipers/ipython.py", None),
    ("calipers/_boot/sitecustomize.py", None),
    ("calipers/schema/calipers-1.schema.json", None),
    ("calipers/_calipers.", ".so"),
    ("calipers/libcalipers_shim.so", None),
]


def version_tuple(text):
    return tuple(int(p) for p in text.split("."))


# ---- reading ELF files ------------------------------------------------------

class Elf:
    """What the policy looks at in one ELF shared object: its architecture,
    DT_NEEDED libraries, the symbol versions it needs (.gnu.version_r) and
    its undefined dynamic symbols.  Raises ValueError if `data` is not a
    well-formed ELF file."""

    def __init__(self, data):
        if data[:4] != b"\x7fELF":
            raise ValueError("not an ELF file")
        is64, little = data[4] == 2, data[5] == 1
        self.e = "<" if little else ">"
        self.data = data
        self.is64 = is64
        if is64:
            (machine,) = struct.unpack_from(self.e + "H", data, 18)
            shoff, = struct.unpack_from(self.e + "Q", data, 40)
            shentsize, shnum = struct.unpack_from(self.e + "HH", data, 58)
        else:
            (machine,) = struct.unpack_from(self.e + "H", data, 18)
            shoff, = struct.unpack_from(self.e + "I", data, 32)
            shentsize, shnum = struct.unpack_from(self.e + "HH", data, 46)
        self.arch = MACHINES.get(machine)
        if machine == 21:
            self.arch = "ppc64le" if little else "ppc64"
        self.sections = []
        for i in range(shnum):
            off = shoff + i * shentsize
            if is64:
                name, stype, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
                    self.e + "IIQQQQIIQQ", data, off)
            else:
                name, stype, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
                    self.e + "IIIIIIIIII", data, off)
            if offset + size > len(data) and stype != 8:  # SHT_NOBITS has no bytes
                raise ValueError("section %d runs past the end of the file" % i)
            self.sections.append((stype, offset, size, link, entsize))
        self.needed, self.rpath = [], []
        self.versions = {}  # library -> {version name}
        self.undefined = set()
        for stype, offset, size, link, entsize in self.sections:
            if stype == 6:  # SHT_DYNAMIC
                self._dynamic(offset, size, link)
            elif stype == 0x6FFFFFFE:  # SHT_GNU_verneed
                self._verneed(offset, link)
            elif stype == 11:  # SHT_DYNSYM
                self._dynsym(offset, size, link, entsize)

    def _string(self, strtab, index):
        offset = self.sections[strtab][1] + index
        end = self.data.index(b"\0", offset)
        return self.data[offset:end].decode("utf-8", "replace")

    def _dynamic(self, offset, size, strtab):
        fmt, step = (self.e + "qQ", 16) if self.is64 else (self.e + "iI", 8)
        for off in range(offset, offset + size, step):
            tag, value = struct.unpack_from(fmt, self.data, off)
            if tag == 0:  # DT_NULL
                break
            if tag == 1:  # DT_NEEDED
                self.needed.append(self._string(strtab, value))
            elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH
                self.rpath.append(self._string(strtab, value))

    def _verneed(self, offset, strtab):
        while True:
            _, count, file_, aux, next_ = struct.unpack_from(self.e + "HHIII", self.data, offset)
            library = self._string(strtab, file_)
            a = offset + aux
            for _ in range(count):
                _, _, _, name, anext = struct.unpack_from(self.e + "IHHII", self.data, a)
                self.versions.setdefault(library, set()).add(self._string(strtab, name))
                a += anext
            if not next_:
                break
            offset += next_

    def _dynsym(self, offset, size, strtab, entsize):
        for off in range(offset, offset + size, entsize or (24 if self.is64 else 16)):
            if self.is64:
                name, _, _, shndx = struct.unpack_from(self.e + "IBBH", self.data, off)
            else:
                name, _, _, _, _, shndx = struct.unpack_from(self.e + "IIIBBH", self.data, off)
            if shndx == 0 and name:  # SHN_UNDEF
                self.undefined.add(self._string(strtab, name))


def policy_problems(name, elf):
    """[problem] for one ELF file against the policy; and the newest glibc
    version it needs, as a tuple."""
    problems = []
    for lib in elf.needed:
        if lib not in ALLOWED_LIBS and not LOADER.match(lib):
            problems.append("%s needs %s, which the manylinux policy does not allow "
                            "(a manylinux system need not have it)" % (name, lib))
    if elf.rpath:
        problems.append("%s has an RPATH/RUNPATH %s" % (name, ":".join(elf.rpath)))
    glibc = (2, 5)
    for lib, versions in sorted(elf.versions.items()):
        for v in sorted(versions):
            abi, _, number = v.partition("_")
            if abi == "GLIBC" and re.match(r"^\d+(\.\d+)+$", number):
                glibc = max(glibc, version_tuple(number))
            elif abi in OTHER_ABI_MAX and re.match(r"^\d+(\.\d+)+$", number):
                if version_tuple(number) > OTHER_ABI_MAX[abi]:
                    problems.append("%s needs %s from %s, newer than manylinux_2_17 allows"
                                    % (name, v, lib))
            elif abi != "GLIBC" or number != "PRIVATE":
                problems.append("%s needs %s from %s, which this check does not know "
                                "(use auditwheel)" % (name, v, lib))
            else:
                problems.append("%s needs glibc's private ABI (%s)" % (name, v))
    for sym in sorted(elf.undefined & FORBIDDEN_SYMBOLS):
        problems.append("%s uses %s, which the manylinux policy forbids" % (name, sym))
    return problems, glibc


# ---- the wheel's tag ----------------------------------------------------------

WHEEL_NAME = re.compile(r"^(?P<dist>[^-]+)-(?P<ver>[^-]+)(-(?P<build>\d[^-]*))?-"
                        r"(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


def platform_glibc(plat):
    """(X, Y, arch) of a manylinux platform tag, or None."""
    m = re.match(r"^manylinux_(\d+)_(\d+)_(\w+)$", plat)
    if m:
        return int(m.group(1)), int(m.group(2)), m.group(3)
    m = re.match(r"^(manylinux1|manylinux2010|manylinux2014)_(\w+)$", plat)
    if m:
        return LEGACY[m.group(1)] + (m.group(2),)
    return None


def extension_tag(names):
    """(python tag, abi tag) that the extension module's file name implies,
    or None: _calipers.cpython-312-x86_64-linux-gnu.so -> cp312, cp312."""
    for n in names:
        m = re.match(r"^calipers/_calipers\.cpython-(\d)(\d+)(t?)-[^.]+\.so$", n)
        if m:
            tag = "cp%s%s" % (m.group(1), m.group(2))
            return tag, tag + m.group(3)
        if re.match(r"^calipers/_calipers\.abi3\.so$", n):
            return None, "abi3"
    return None


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def retag(path, platform):
    """Write the wheel at `path` again with `platform` as its platform tag
    (file name, WHEEL's Tag lines, RECORD's line for WHEEL), remove the old
    one, and return the new path."""
    m = WHEEL_NAME.match(os.path.basename(path))
    new_name = "%s-%s%s-%s-%s-%s.whl" % (m["dist"], m["ver"],
                                         "-" + m["build"] if m["build"] else "",
                                         m["py"], m["abi"], platform)
    new_path = os.path.join(os.path.dirname(path), new_name)
    with zipfile.ZipFile(path) as old:
        infos = old.infolist()
        contents = {i.filename: old.read(i) for i in infos}
    wheel_file = next(n for n in contents if n.endswith(".dist-info/WHEEL"))
    record_file = next(n for n in contents if n.endswith(".dist-info/RECORD"))
    lines = [ln for ln in contents[wheel_file].decode().splitlines() if not ln.startswith("Tag:")]
    for py in m["py"].split("."):
        for abi in m["abi"].split("."):
            lines.append("Tag: %s-%s-%s" % (py, abi, platform))
    contents[wheel_file] = ("\n".join(lines) + "\n").encode()
    record = [record_line(wheel_file, contents[wheel_file]) if ln.split(",")[0] == wheel_file
              else ln for ln in contents[record_file].decode().splitlines()]
    contents[record_file] = ("\n".join(record) + "\n").encode()
    tmp = new_path + ".part"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as new:
        for info in infos:
            new.writestr(info, contents[info.filename], zipfile.ZIP_DEFLATED)
    os.replace(tmp, new_path)
    if new_path != path:
        os.unlink(path)
    return new_path


# ---- the checks -----------------------------------------------------------------

def binaries(wheel):
    """{name: Elf} for every ELF file in the wheel (and a list of problems
    for files that start like ELF but cannot be read)."""
    found, problems = {}, []
    for info in wheel.infolist():
        with wheel.open(info) as f:
            if f.read(4) != b"\x7fELF":
                continue
        try:
            found[info.filename] = Elf(wheel.read(info))
        except (ValueError, struct.error) as exc:
            problems.append("%s: unreadable ELF file (%s)" % (info.filename, exc))
    return found, problems


def needed_platform(elves):
    """The manylinux platform tag the binaries allow (oldest glibc, at least
    2.17), their problems, and their architecture (None if mixed)."""
    problems, glibc = [], (2, 17)
    for name, elf in sorted(elves.items()):
        p, g = policy_problems(name, elf)
        problems += p
        glibc = max(glibc, g)
    arches = {elf.arch for elf in elves.values()}
    arch = arches.pop() if len(arches) == 1 else None
    if arch is None:
        problems.append("the binaries are for %s, not one architecture"
                        % (", ".join(sorted(map(str, arches))) or "no architecture"))
    return "manylinux_%d_%d_%s" % (glibc[0], glibc[1], arch), glibc, arch, problems


def check(path):
    """Every check on the wheel at `path`: (passed, [failure])."""
    passed, failures = 0, []

    def expect(ok, message):
        nonlocal passed
        if ok:
            passed += 1
        else:
            failures.append(message)

    wheel = zipfile.ZipFile(path)
    names = wheel.namelist()
    for prefix, suffix in REQUIRED:
        ok = any(n.startswith(prefix) and (suffix is None or n.endswith(suffix)) for n in names)
        expect(ok, "missing from the wheel: %s*%s" % (prefix, suffix or ""))
    script = [n for n in names if re.search(r"\.data/scripts/calipers-py$", n)]
    expect(script and wheel.read(script[0]).startswith(b"#!python\n") and
           b"from calipers.cli import main" in wheel.read(script[0]),
           "the wheel holds no calipers-py script (.data/scripts/calipers-py, #!python)")
    launcher = [n for n in names if re.search(r"\.data/scripts/calipers$", n)]
    expect(launcher and wheel.read(launcher[0])[:4] == b"\x7fELF",
           "the wheel holds no calipers launcher (.data/scripts/calipers, an ELF executable)")
    licence = [n for n in names if re.search(r"\.dist-info/licenses/LICENSE$", n)]
    expect(licence and b"MIT License" in wheel.read(licence[0]),
           "the wheel holds no LICENSE (MIT) in .dist-info/licenses/")
    metadata = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = wheel.read(metadata[0]).decode() if metadata else ""
    expect(re.search(r"^License-Expression: MIT$", meta, re.M),
           "METADATA has no License-Expression: MIT")
    expect(re.search(r"^Project-URL: Source, https://", meta, re.M),
           "METADATA has no Project-URL for the source")
    # The README is the package index's page: its links must be absolute.
    relative = re.findall(r"\]\((?!https?://|#)([^)]+)\)", meta.partition("\n\n")[2])
    expect(not relative, "the README's links %s do not work on the package index"
           % ", ".join(relative))

    elves, unreadable = binaries(wheel)
    for problem in unreadable:
        expect(False, problem)
    shim = [n for n in names if n.endswith("libcalipers_shim.so")]
    if shim:
        expect(not any(n.startswith("libpython") for n in elves[shim[0]].needed),
               "the shim links libpython")
    platform, glibc, arch, problems = needed_platform(elves)
    for problem in problems:
        expect(False, problem)
    expect(elves, "the wheel holds no binaries")

    m = WHEEL_NAME.match(os.path.basename(path))
    expect(m, "%s is not a wheel's file name" % os.path.basename(path))
    if not m:
        return passed, failures
    wheel_file = [n for n in names if n.endswith(".dist-info/WHEEL")]
    tags = set(re.findall(r"^Tag: (\S+)$", wheel.read(wheel_file[0]).decode(), re.M)
               if wheel_file else [])
    named = {"%s-%s-%s" % (py, abi, plat) for py in m["py"].split(".")
             for abi in m["abi"].split(".") for plat in m["plat"].split(".")}
    expect(tags == named, "the WHEEL file's tags %s are not the file name's %s"
           % (sorted(tags), sorted(named)))
    for plat in m["plat"].split("."):
        many = platform_glibc(plat)
        expect(many, "%s is not a manylinux platform tag (a wheel built here is tagged "
               "linux_ARCH; %s qualifies for %s: --retag writes it)"
               % (plat, os.path.basename(path), platform))
        if many:
            expect(many[:2] >= glibc, "tagged %s, but its binaries need glibc %s"
                   % (plat, ".".join(map(str, glibc))))
            expect(many[2] == arch, "tagged %s, but its binaries are for %s" % (plat, arch))
    ext = extension_tag(names)
    expect(ext is not None, "the wheel holds no extension module to match its tag with")
    if ext:
        py, abi = ext
        expect(m["abi"] == abi and (py is None or m["py"] == py),
               "tagged %s-%s, but the extension module is built for %s-%s"
               % (m["py"], m["abi"], py, abi))
    return passed, failures


def main(argv):
    args = argv[1:]
    want_retag = "--retag" in args
    args = [a for a in args if a != "--retag"]
    if len(args) != 1:
        sys.exit("usage: check-wheel.py [--retag] WHEEL")
    path = args[0]
    m = WHEEL_NAME.match(os.path.basename(path))
    if want_retag and m and re.match(r"^linux_\w+$", m["plat"]):
        with zipfile.ZipFile(path) as wheel:
            elves, unreadable = binaries(wheel)
        platform, _, arch, problems = needed_platform(elves)
        if elves and not problems and not unreadable and m["plat"] == "linux_" + arch:
            path = retag(path, platform)
            print("retagged: %s" % os.path.basename(path))
    passed, failures = check(path)
    for failure in failures:
        print(failure)
    print("%d passed, %d failed" % (passed, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
