import type { Meter } from '@opentelemetry/api';
import type { ClockSource } from '@idgen/clock-guard';
import type { Layout } from '@idgen/core';
import type { EtcdConnectionOptions, LeaseLogger, WorkerRange } from '@idgen/lease';

/** Options of {@link createEmbeddedIdSource}. Every duration is in milliseconds. */
export interface EmbeddedIdSourceOptions {
  /** The region's etcd: endpoints, TLS, auth and key prefix (the lease's and discovery's connection options). */
  readonly etcd: EtcdConnectionOptions;
  /** The home region code: every ID carries it. */
  readonly region: number;
  /** Slots this source may claim: `{first, last}` or `"18-127"`; default 18-127 (nodes default to 0-17). */
  readonly workers?: WorkerRange | string;
  /**
   * When every slot of `workers` is held, claim a slot under a spare code the region's etcd records as lent to
   * `region` (`idgen spare lend`, docs/design.md §7); IDs minted there carry that code. Given back when the code is
   * reclaimed (the source then claims again). Default false.
   */
  readonly borrowSpare?: boolean;
  /**
   * The deployment's spare-code registry (the etcd every `idgen spare` command names with `--registry`), required with
   * `borrowSpare`: each loan is confirmed there before a slot is claimed under it (docs/design.md §7).
   */
  readonly registry?: EtcdConnectionOptions;
  /** The holder's id in the worker record (`idgen leases` shows it); default `<hostname>-<pid>-<random>`. */
  readonly nodeId?: string;
  /** Lease TTL in whole seconds; default 6 (docs/design.md §3). */
  readonly ttlSeconds?: number;
  /** Keep-alive interval; default a third of the TTL, at most 2000 (as the server's). */
  readonly keepAliveIntervalMs?: number;
  /** Timeout of one keep-alive plus its `last-ms` refresh; default 3/4 of the interval. */
  readonly keepAliveTimeoutMs?: number;
  /** Fence this long before etcd could expire the lease; default 1000. */
  readonly fenceMarginMs?: number;
  /** Clock bound added to an unclean floor; default 10. */
  readonly clockBoundMs?: number;
  /** Timeout of each etcd request of the claim; default 5000. */
  readonly requestTimeoutMs?: number;
  /** Backoff between claim attempts; default 250 to 2000. */
  readonly backoff?: { readonly initialMs?: number; readonly maxMs?: number };
  /**
   * The time-source check, as the server's `--time-source`: `chrony` (default) reads `chronyc -c tracking` and
   * fences while the clock is unsynchronised or off by more than `maxClockOffsetMs`; `none` trusts the clock
   * (development only, logged loudly).
   */
  readonly timeSource?: 'chrony' | 'none';
  /** Largest |offset| from the time source; default 10. */
  readonly maxClockOffsetMs?: number;
  /** The chronyc binary; default `chronyc` on PATH. */
  readonly chronycPath?: string;
  /** How often an unhealthy time source is read again while starting; default 2000. */
  readonly timeSourceRetryMs?: number;
  /** Rollbacks up to this size are waited out, larger ones fence; default 10. */
  readonly maxRollbackMs?: number;
  /** A clock fence longer than this calls `onFatal`; default 30000. */
  readonly maxFenceMs?: number;
  /** How long the start waits for a free slot when the range is full, then gives up; default 30000. */
  readonly slotWaitMs?: number;
  /** Default deadline of one asynchronous call waiting for a slot or for a fence to lift; default 2000. */
  readonly deadlineMs?: number;
  readonly layout?: Layout;
  /**
   * The deployment's key of the `keyed` form (16–64 bytes, or hex text), for `nextId({ form: 'keyed' })`; without
   * it that form is refused. Keep it secret: it decodes every keyed ID (docs/design.md §1 "Forms").
   */
  readonly keyedFormKey?: Uint8Array | string;
  /**
   * The wall and monotonic clocks the guard and the lease read; default the process's. Tests inject one only where
   * the real clock cannot be driven (a VM's wall clock stepped ahead while cut off from etcd).
   */
  readonly clock?: ClockSource;
  /** Where the guard's and the lease's metrics go; default the global meter provider's. */
  readonly meter?: Meter;
  /** Structured logger (pino fits); default silent. */
  readonly logger?: LeaseLogger;
  /**
   * A clock fence lasted longer than `maxFenceMs`. The server exits there so it restarts on a fresh lease; a
   * library does not end its caller's process, so the source stays fenced (it never mints below its last
   * millisecond) and tells the caller. Default: `logger.error`.
   */
  readonly onFatal?: (reason: string) => void;
}
