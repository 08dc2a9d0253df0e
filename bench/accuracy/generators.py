"""Lines inside generators, coroutines and a decorated function (issue 18,
item 1): the same 40-iteration loop run per item of a generator pipeline,
of a chain of awaited coroutines (in asyncio.run) and through a
decorator's wrapper; each switches frames every microsecond or two.

The truth is what the loop's iterations cost in the same functions: each
shape runs with the loop and, between, without it (a quarter of the
items), timed by thread_time.  iterations / (with + without) is the hot
lines' least share of the shape's time (the lines also set each loop up).
The hot lines carry `# @<shape>_hot` markers.  tests/test_cpu.py runs
it too (test_lines_inside_generators_coroutines_and_decorators), with
BENCH_ROUNDS=3."""
import asyncio
import functools
import json
import os
import time

import _truth

INNER = 40
ITEMS = 150_000
#: Runs of each shape (tests/test_cpu.py asks for fewer).
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "6"))


# ---- a generator pipeline
def source(n):
    for i in range(n):
        yield i


def work(values, inner):
    for v in values:
        x = 0  # @gen_hot
        for k in range(inner):  # @gen_hot
            x += (v * k) % 7  # @gen_hot
        yield x  # @gen_yield


def keep_even(values):
    for v in values:
        if v % 2 == 0:
            yield v


def pipeline(n, inner):
    total = 0
    for v in keep_even(work(source(n), inner)):
        total += v
    return total


# ---- awaited coroutines, in a running event loop
async def co_leaf(v, inner):
    x = 0  # @co_hot
    for k in range(inner):  # @co_hot
        x += (v * k) % 7  # @co_hot
    return x  # @co_return


async def co_middle(v, inner):
    return await co_leaf(v, inner)


async def co_main(n, inner):
    total = 0
    for v in range(n):
        total += await co_middle(v, inner)
        if v % 512 == 0:
            await asyncio.sleep(0)
    return total


def coroutines(n, inner):
    return asyncio.run(co_main(n, inner))


# ---- a decorated function
def traced(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)  # @dec_wrapper

    return wrapper


@traced
def dec_item(v, inner):
    x = 0  # @dec_hot
    for k in range(inner):  # @dec_hot
        x += (v * k) % 7  # @dec_hot
    return x


def dec_main(n, inner):
    total = 0
    for v in range(n):
        total += dec_item(v, inner)
    return total


def timed(fn, *args):
    t0 = time.thread_time()
    fn(*args)
    return time.thread_time() - t0


def main():
    shapes = {"gen": pipeline, "co": coroutines, "dec": dec_main}
    spent = {shape: {"full": 0.0, "empty": 0.0} for shape in shapes}
    for _ in range(ROUNDS):
        for shape, fn in shapes.items():
            spent[shape]["full"] += timed(fn, ITEMS, INNER)
            spent[shape]["empty"] += timed(fn, ITEMS // 4, 0)
    for figures in spent.values():
        figures["iterations"] = figures["full"] - 4 * figures["empty"]
    _truth.write(shapes=spent)


main()
