import assert from "node:assert/strict";
import { concurrency, type Hold, writerOverlaps } from "../chaos/handles.ts";

const hold = (kind: Hold["kind"], start: number, end: number): Hold => ({
  worker: 0,
  kind,
  start,
  end,
});

Deno.test("the handles' chaos checker reports a writer that overlaps a reader or a writer", () => {
  assert.equal(
    writerOverlaps([hold("read", 0, 10), hold("read", 5, 15), hold("write", 15, 20)]),
    0,
  );
  assert.equal(writerOverlaps([hold("read", 0, 10), hold("write", 9, 20)]), 1);
  assert.equal(writerOverlaps([hold("write", 0, 10), hold("write", 5, 20)]), 2);
});

Deno.test("the handles' chaos checker counts permits valid at once and over-subscription", () => {
  const holds = [hold("permit", 0, 10), hold("permit", 2, 12), hold("permit", 10, 20)];
  assert.deepEqual(concurrency(holds, 2), [2, 0], "a lease that ends as another starts");
  assert.deepEqual(concurrency([...holds, hold("permit", 11, 13)], 2), [3, 1]);
});

Deno.test("the handles' chaos checker sums the permits of weighted holds", () => {
  const weighted = (start: number, end: number, weight: number): Hold => ({
    ...hold("permit", start, end),
    weight,
  });
  const holds = [weighted(0, 10, 3), weighted(2, 12, 2), weighted(10, 20, 3)];
  assert.deepEqual(concurrency(holds, 5), [5, 0], "3 + 2, then 2 + 3");
  assert.deepEqual(concurrency([...holds, weighted(11, 13, 1)], 5), [6, 1]);
});
