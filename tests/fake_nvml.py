"""Build and configure the fake NVML library (tests/c/fake_nvml.c), which
stands in for libnvidia-ml.so.1 on machines without a GPU."""

import os
import shlex
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "c" / "fake_nvml.c"
LIBRARY = "libnvidia-ml.so.1"
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
          f"-Wl,-soname,{LIBRARY}"]


def build(dest_dir, omit=(), cc=None):
    """Compile the fake into dest_dir/libnvidia-ml.so.1, leaving out the NVML
    functions named in `omit`; returns dest_dir as a Path."""
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    cc = cc or os.environ.get("CC") or "cc"
    cmd = [*shlex.split(cc), *CFLAGS, *(f"-DOMIT_{name}" for name in omit),
           str(SOURCE), "-o", str(dest / LIBRARY), "-lpthread"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise RuntimeError(f"cannot build the fake NVML: {shlex.join(cmd)}: {e}") from e
    if proc.returncode != 0:
        raise RuntimeError(f"building the fake NVML failed (exit {proc.returncode}):\n"
                           f"{shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return dest


def env(lib_dir, **settings):
    """A copy of os.environ that loads the fake from lib_dir, with FAKE_NVML_*
    set from the keyword arguments (devices=2 -> FAKE_NVML_DEVICES=2; True/False
    -> 1/0; a list or tuple is comma-joined; None leaves the variable unset).
    FAKE_NVML_* variables inherited from os.environ are dropped."""
    result = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    old = result.get("LD_LIBRARY_PATH")
    result["LD_LIBRARY_PATH"] = f"{lib_dir}:{old}" if old else str(lib_dir)
    for key, value in settings.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = int(value)
        elif isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        result[f"FAKE_NVML_{key.upper()}"] = str(value)
    return result
