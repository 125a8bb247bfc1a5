// Loaded only on runtimes with `await using` (Bun): Node 20 cannot parse it.
export async function awaitUsing(redlock, resource) {
  {
    await using lock = await redlock.acquire(resource, 2_000);
    if (!(await redlock.isLocked(resource))) throw new Error("not held inside the block");
    void lock;
  }
  return await redlock.isLocked(resource);
}
