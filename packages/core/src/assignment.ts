/**
 * The contract between a lease and the clock guard it drives (docs/design.md §5), declared once here so that
 * `@idgen/lease` and `@idgen/clock-guard` share it without depending on each other.
 */

/** What the lease hands the guard once it holds a slot and the clock has passed the floor (docs/design.md §5). */
export interface WorkerAssignment {
  readonly region: number;
  readonly worker: number;
  /** Never mint at or below this Unix millisecond: a previous holder of the slot may have used it. */
  readonly floorMs: number;
  /** Monotonic ms after which minting stops unless a keep-alive extends it. */
  readonly deadlineMonoMs: number;
  /**
   * The wall ceiling (docs/design.md §5): never mint a Unix millisecond above it. The lease sets it to
   * `L + TTL − margin`, `L` the last `last-ms` etcd acknowledged for the slot, so whatever the wall clock
   * does (a VM frozen and resumed, a clock stepped forward), nothing is minted at or above the floor the
   * slot's next holder computes from `last-ms`.
   */
  readonly ceilingMs: number;
}

/** What an acknowledged keep-alive and `last-ms` refresh give the guard: both limits move forward. */
export interface LeaseExtension {
  readonly deadlineMonoMs: number;
  readonly ceilingMs: number;
}
