"""Prints what a program can see of how it was started."""
import json
import os
import sys

main = sys.modules["__main__"]
print(json.dumps({
    "argv": sys.argv,
    "name": __name__,
    "file": __file__,
    "main_file": getattr(main, "__file__", None),
    "spec": None if __spec__ is None else [__spec__.name, __spec__.origin],
    "path0": sys.path[0],
    "path": sys.path,
    "builtins": type(__builtins__).__name__,
    "env_calipers": sorted(k for k in os.environ if "CALIPERS" in k),
    "pythonpath": os.environ.get("PYTHONPATH"),
    "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
    "warnoptions": sys.warnoptions,
}, sort_keys=True))
sys.stderr.write("to stderr\n")
