"""1,000 asyncio tasks that sleep 30 times each (20-60 ms a time): an
event loop that is mostly idle with a thousand tasks waiting, the worst
case for crediting its waiting to the awaiting lines.  Prints the wall
time and the CPU time."""
import asyncio
import time


async def worker(i):
    for _ in range(30):
        await asyncio.sleep(0.02 * (1 + i % 3))


async def main():
    await asyncio.gather(*(worker(i) for i in range(1000)))


t0, c0 = time.perf_counter(), time.process_time()
asyncio.run(main())
print("wall %.3f s, CPU %.3f s" % (time.perf_counter() - t0, time.process_time() - c0))
