/** A holder asked for IDs without waiting: `@idgen/embedded`'s source (`tryNextId`), or anything that takes one. */
export interface IdTaker {
  /** One ID now, or undefined when the holder has none to hand out (not assigned, fenced, or out of its block). */
  tryNextId(): bigint | undefined;
}

/** What {@link mintTogether} saw: how many IDs each holder handed out, and how many of them both did. */
export interface MintedTogether {
  readonly first: number;
  readonly second: number;
  readonly common: number;
}

/**
 * Two holders mint at once, up to 256 IDs each a turn (a turn yields to the event loop, so their leases keep talking
 * to etcd), until each has handed out `atLeast` IDs or `withinMs` pass: a holder refused for good (a fence, the fix of
 * a double hold) stops the run only by the deadline. The IDs both handed out are the finding of a double hold.
 */
export async function mintTogether(
  a: IdTaker,
  b: IdTaker,
  o: { readonly atLeast: number; readonly withinMs: number },
): Promise<MintedTogether> {
  const [first, second] = [new Set<bigint>(), new Set<bigint>()];
  const end = Date.now() + o.withinMs;
  while (Date.now() < end && (first.size < o.atLeast || second.size < o.atLeast)) {
    for (const [s, ids] of [
      [a, first],
      [b, second],
    ] as const)
      for (let k = 0; k < 256; k++) {
        const id = s.tryNextId();
        if (id === undefined) break;
        ids.add(id);
      }
    await new Promise((r) => setImmediate(r));
  }
  let common = 0;
  for (const id of second) if (first.has(id)) common++;
  return { first: first.size, second: second.size, common };
}
