"""Frames pushed and popped as fast as Python can: an asyncio tree of
gathered coroutines (like pyperformance's async_tree) and deep recursive
generators, for a few seconds.  The sampler peeks at the main thread's
frames without the GIL while they come and go; a peek that follows a
frame overwritten meanwhile must fail, never fault (argv[1]: seconds)."""
import asyncio
import sys
import time


async def leaf(i):
    await asyncio.sleep(0)
    return i * 2


async def tree(depth, width):
    if depth == 0:
        return await leaf(width)
    parts = await asyncio.gather(*(tree(depth - 1, width) for _ in range(width)))
    return sum(parts)


def nested(n):
    if n:
        yield from nested(n - 1)
    yield n


deadline = time.perf_counter() + float(sys.argv[1])
rounds = 0
while time.perf_counter() < deadline:
    asyncio.run(tree(4, 4))
    sum(nested(60))
    rounds += 1
print("rounds", rounds > 0)
