/** What went wrong, as a closed set (docs/style.md "Errors": a small family with a `code`). */
export type LeaseErrorCode =
  /** A configuration value is invalid; found before any I/O (docs/design.md §5 boot step 1). */
  | 'config'
  /** `{prefix}/layout` in etcd differs from this process's layout (docs/design.md §1). */
  | 'layout-mismatch'
  /** A key this package reads holds something it cannot understand. */
  | 'corrupt-record'
  /** A record of a newer schema than this release reads (docs/design.md §5 "Record schema"): upgrade this node. */
  | 'record-schema'
  /** Every worker slot this node may claim is held. */
  | 'no-free-worker'
  /** The lease was released; it cannot start again. */
  | 'released'
  /** Standalone mode: the state file is locked by another node, unreadable or unwritable. */
  | 'state-file'
  /** etcd refuses this node: bad credentials, a role without access, TLS certificates that do not verify. */
  | 'etcd-access'
  /** A spare region code refused: lent out, not adopted, or a lend/reclaim/adopt step that may not run (docs/design.md §7). */
  | 'spare-code'
  /** This etcd is not bound to this region code, was never bound, or reports another cluster (docs/design.md §5). */
  | 'region-binding';

const brand = Symbol.for('@idgen/lease.LeaseError');

/** The base of every error this package throws on purpose. */
export class LeaseError extends Error {
  readonly code: LeaseErrorCode;
  /** Whether trying again later may succeed (a free slot may appear; a bad config will not fix itself). */
  readonly retryable: boolean;
  readonly [brand] = true;

  constructor(code: LeaseErrorCode, message: string, retryable: boolean) {
    super(message);
    this.name = 'LeaseError';
    this.code = code;
    this.retryable = retryable;
  }

  /** `e` if it is a LeaseError, else `undefined` (an unknown error is never relabelled as one of ours). */
  static from(e: unknown): LeaseError | undefined {
    return isLeaseError(e) ? e : undefined;
  }
}

/** A bad configuration value, reported before any I/O. `problems` lists every bad value, not just the first. */
export class LeaseConfigError extends LeaseError {
  readonly problems: readonly string[];
  constructor(problems: readonly string[]) {
    super('config', `invalid lease configuration: ${problems.join('; ')}`, false);
    this.name = 'LeaseConfigError';
    this.problems = problems;
  }
}

/** The layout recorded in etcd differs from this process's: the process must not start (docs/design.md §1). */
export class LayoutMismatchError extends LeaseError {
  readonly differences: readonly string[];
  constructor(key: string, differences: readonly string[]) {
    super(
      'layout-mismatch',
      `the ID layout in etcd (${key}) differs from this process's: ${differences.join('; ')}. ` +
        'Every process of a deployment must use the same epoch and bit widths.',
      false,
    );
    this.name = 'LayoutMismatchError';
    this.differences = differences;
  }
}

/** A key this package reads holds garbage: says which key, what is wrong, and what it held. */
export class CorruptRecordError extends LeaseError {
  readonly key: string;
  constructor(key: string, problem: string, raw: string, code: 'corrupt-record' | 'record-schema' = 'corrupt-record') {
    const shown = raw.length > 200 ? `${raw.slice(0, 200)}…` : raw;
    super(code, `etcd key ${key} holds an unreadable value (${problem}): ${JSON.stringify(shown)}`, false);
    this.name = 'CorruptRecordError';
    this.key = key;
  }
}

/**
 * A record of a newer schema than this release reads (docs/design.md §5 "Record schema"): written by a later release
 * that changed it. A `CorruptRecordError` (the slot, the layout or the binding is refused, as for garbage) with its
 * own code, `record-schema`, so a node's start exits 2 (the operator's to fix); its one-line message names the key,
 * both schemas and what to do.
 */
export class UnreadableSchemaError extends CorruptRecordError {
  readonly schema: number;
  readonly readable: number;
  constructor(key: string, schema: number, readable: number, raw: string) {
    super(
      key,
      `schema ${schema}, and this release reads schemas up to ${readable}: a later release wrote it; run that release ` +
        `or a newer one here, never an older one, and see the README's "Upgrades" for which versions share a region`,
      raw,
      'record-schema',
    );
    this.name = 'UnreadableSchemaError';
    this.schema = schema;
    this.readable = readable;
  }
}

/** Who holds a slot, as far as the claimer could tell. */
export interface SlotHolder {
  readonly region: number;
  readonly worker: number;
  /** The holder's node id, or a note why it is unknown (garbage, vanished). */
  readonly holder: string;
}

/** Every slot this node may claim is busy (or refused for a reason given in `refused`). Retryable. */
export class NoFreeWorkerError extends LeaseError {
  readonly slots: number;
  readonly holders: readonly SlotHolder[];
  readonly refused: readonly string[];
  constructor(slots: number, holders: readonly SlotHolder[], refused: readonly string[] = []) {
    const shown = holders
      .slice(0, 16)
      .map((h) => `${h.region}/${h.worker}: ${h.holder}`)
      .join(', ');
    const more = holders.length > 16 ? `, … ${holders.length - 16} more` : '';
    const why = refused.length > 0 ? `; refused ${refused.length}: ${refused.join('; ')}` : '';
    super(
      'no-free-worker',
      `no free worker slot: all ${slots} slot${slots === 1 ? '' : 's'} this node may claim are held ` +
        `(${holders.length} held${holders.length > 0 ? `: ${shown}${more}` : ''}${why})`,
      true,
    );
    this.name = 'NoFreeWorkerError';
    this.slots = slots;
    this.holders = holders;
    this.refused = refused;
  }
}

/** True when `e` is any error of this package (checks a brand, so it works across copies of the package). */
export function isLeaseError(e: unknown): e is LeaseError {
  return typeof e === 'object' && e !== null && (e as { [brand]?: unknown })[brand] === true;
}

/** True when `e` is a {@link NoFreeWorkerError}. */
export function isNoFreeWorkerError(e: unknown): e is NoFreeWorkerError {
  return isLeaseError(e) && e.code === 'no-free-worker';
}
