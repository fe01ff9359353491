/**
 * An operator's clock a loan term and a quarter (and a second) behind the machine's: a lend made through it is one made
 * that long ago, so its first-claim wait (docs/design.md §7, "Loan terms": a new loan's borrowers wait a term and a
 * quarter) is already over, and its term still has most of a term to run. For specs whose subject comes after that
 * wait; the wait itself is shown by `packages/lease/test/spare-codes.spec.ts` and `apps/cli/test/spare.spec.ts` in real
 * time.
 */
export function lentEarlierClock(termMs: number): () => number {
  const behindMs = termMs + Math.ceil(termMs / 4) + 1000;
  return () => Date.now() - behindMs;
}
