"""A program whose main thread sleeps (no Python code runs: a request
from calipers attach waits), then prints and exits 5."""
import sys
import time

print("ready", flush=True)
time.sleep(float(sys.argv[1]))
print("woke", flush=True)
sys.exit(5)
