"""Leaks: one line keeps every buffer it makes (a leak: 64 KiB each, 3,000
times), one makes and frees the same amount, one fills a cache that is
emptied every 500 steps and at the end (growth that is not a leak).
Truth: which line leaks."""
import time

import _truth

kept = []
cache = []


def step(i):
    kept.append(bytearray(64 << 10))  # @leak
    scratch = bytearray(64 << 10)  # @churn
    cache.append(bytearray(64 << 10))  # @cache
    if i % 500 == 499:
        cache.clear()
    return scratch


def main():
    for i in range(3000):
        step(i)
        if i % 50 == 0:
            time.sleep(0.02)
    _truth.write(leaks=["leak"], not_leaks=["churn", "cache"], leaked_bytes=len(kept) * (64 << 10))


main()
