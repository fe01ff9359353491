import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Meter } from '@opentelemetry/api';
import { DEFAULT_LAYOUT } from '@idgen/core';
import type { Layout } from '@idgen/core';
import { systemClock } from './clock.js';
import type { ClockSource } from './clock.js';
import { LeaseConfigError } from './errors.js';
import { silentLogger } from './types.js';
import type { LeaseLogger } from './types.js';
import type { TenureWitness } from './tenure-witness.js';
import type { EtcdTlsOptions } from './etcd-tls.js';

export type { EtcdTlsOptions } from './etcd-tls.js';

/** Default key prefix (docs/design.md §5). */
export const DEFAULT_PREFIX = '/idgen';
/** Default lease TTL in seconds (docs/design.md §3). */
export const DEFAULT_TTL_SECONDS = 6;
/** Default keep-alive interval (docs/design.md §3). */
export const DEFAULT_KEEPALIVE_INTERVAL_MS = 2000;
/** Default safety margin between the fence deadline and the earliest etcd expiry (docs/design.md §5). */
export const DEFAULT_FENCE_MARGIN_MS = 1000;
/** Default bound on clock error between nodes (docs/design.md §2: clocks within 10 ms). */
export const DEFAULT_CLOCK_BOUND_MS = 10;
/**
 * Every default of the lease's options in one table (docs/style.md "Defaults and contracts"): the etcd lease's
 * ({@link resolveLeaseConfig}), the standalone lease's and the spare-code reads'. The `DEFAULT_*` constants above are
 * the same values under their published names.
 */
export const LEASE_DEFAULTS = {
  prefix: DEFAULT_PREFIX,
  ttlSeconds: DEFAULT_TTL_SECONDS,
  keepAliveIntervalMs: DEFAULT_KEEPALIVE_INTERVAL_MS,
  fenceMarginMs: DEFAULT_FENCE_MARGIN_MS,
  clockBoundMs: DEFAULT_CLOCK_BOUND_MS,
  /** One etcd request's deadline (a claim, a `last-ms` write, a spare-code read). */
  requestTimeoutMs: 5000,
  /** Retries of a failed claim back off from this … */
  backoffInitialMs: 250,
  /** … to at most this. */
  backoffMaxMs: 2000,
  /** How long a standalone lease waits for the state file's lock a previous process still holds. */
  lockWaitMs: 15_000,
} as const;

/** Smallest TTL accepted: etcd silently raises shorter TTLs to its own minimum (about 2 s by default). */
export const MIN_TTL_SECONDS = 2;
/** Largest TTL accepted. */
export const MAX_TTL_SECONDS = 3600;

/** An inclusive range of worker slots. */
export interface WorkerRange {
  readonly first: number;
  readonly last: number;
}

/** How to reach etcd (shared by the lease and the discovery reader). */
export interface EtcdConnectionOptions {
  /** Client URLs, `http://host:port` or `https://host:port`. */
  readonly endpoints: readonly string[];
  readonly tls?: EtcdTlsOptions;
  readonly auth?: { readonly username: string; readonly password: string };
  /** Key prefix; default `/idgen`. */
  readonly prefix?: string;
}

/** Options of {@link createEtcdLease}. */
export interface EtcdLeaseOptions extends EtcdConnectionOptions {
  /** Home region code. */
  readonly region: number;
  /**
   * Embedded callers only (docs/design.md §7): when every slot of the home range is held, claim a free slot under a
   * spare code this etcd records as `lent` to the home region (`{prefix}/spare-codes/{code}`); the assignment then
   * carries that code. A holder gives a borrowed slot back at its next refresh once the code is being reclaimed.
   */
  readonly borrowSpare?: boolean;
  /**
   * The deployment's spare-code registry (docs/design.md §7), required with `borrowSpare`: a loan this etcd mirrors is
   * confirmed there before each claim under it, so a mirror a restore brought back after the loan moved on is never
   * claimed under. While it does not answer, no new slot is claimed under a lent code; a slot held is kept.
   */
  readonly registry?: EtcdConnectionOptions;
  /** Slots this node may claim: `{first, last}` or `"0-127"`; default all of the layout's. */
  readonly workers?: WorkerRange | string;
  /** Holder kind recorded in the worker key; default `service`. */
  readonly kind?: 'service' | 'embedded';
  /** Node id (letters, digits, `._:-`, up to 128); default `<hostname>-<pid>-<random>`. */
  readonly nodeId?: string;
  /** Advertised `host:port` for discovery; can also be set later with `setAddress`. */
  readonly address?: string;
  /** Lease TTL in whole seconds; default 6. */
  readonly ttlSeconds?: number;
  /** Keep-alive interval; default a third of the TTL, at most 2000 ms. */
  readonly keepAliveIntervalMs?: number;
  /** Timeout of one keep-alive plus its `last-ms` refresh; default 3/4 of the interval. */
  readonly keepAliveTimeoutMs?: number;
  /** Fence this long before the earliest moment etcd could expire the lease; default 1000 ms. */
  readonly fenceMarginMs?: number;
  /** Clock bound added to an unclean floor; default 10 ms. */
  readonly clockBoundMs?: number;
  /** Timeout of each etcd request on the claim path; default 5000 ms. */
  readonly requestTimeoutMs?: number;
  /** Backoff between claim attempts: first and largest delay; default 250 ms to 2000 ms. */
  readonly backoff?: { readonly initialMs?: number; readonly maxMs?: number };
  /**
   * When every slot is held at start: `false` (default) rejects `start()` with {@link NoFreeWorkerError};
   * `true` keeps trying (with backoff) until a slot frees up, as a spare node does.
   */
  readonly waitForFreeSlot?: boolean;
  readonly layout?: Layout;
  readonly clock?: ClockSource;
  /** Default: the global meter provider's `@idgen/lease` meter. */
  readonly meter?: Meter;
  readonly logger?: LeaseLogger;
  /**
   * The holder's journal of its tenures, outside etcd (tenure-witness.ts, docs/design.md §5): written before the
   * first mint of every claim, at each acknowledged `last-ms`, and at the end. Default none.
   */
  readonly tenureWitness?: TenureWitness;
}

/** The spare-code registry's connection, validated (`prefix` '' for '/'). */
export interface RegistryConnection {
  readonly endpoints: readonly string[];
  readonly tls: EtcdTlsOptions | undefined;
  readonly auth: { readonly username: string; readonly password: string } | undefined;
  readonly prefix: string;
}

/** Validated, defaulted configuration. */
export interface LeaseConfig {
  readonly endpoints: readonly string[];
  readonly tls: EtcdTlsOptions | undefined;
  readonly auth: { readonly username: string; readonly password: string } | undefined;
  readonly prefix: string;
  readonly region: number;
  /** Claim under spare codes lent to the home region once the home range is full (embedded only). */
  readonly borrowSpare: boolean;
  /** The spare-code registry a borrower confirms each loan in (with `borrowSpare`), validated. */
  readonly registry: RegistryConnection | undefined;
  readonly workers: WorkerRange;
  readonly kind: 'service' | 'embedded';
  readonly nodeId: string;
  readonly address: string;
  readonly ttlMs: number;
  readonly ttlSeconds: number;
  readonly keepAliveIntervalMs: number;
  readonly keepAliveTimeoutMs: number;
  readonly fenceMarginMs: number;
  readonly clockBoundMs: number;
  readonly requestTimeoutMs: number;
  readonly backoffInitialMs: number;
  readonly backoffMaxMs: number;
  readonly waitForFreeSlot: boolean;
  readonly layout: Layout;
  readonly clock: ClockSource;
  readonly logger: LeaseLogger;
  readonly tenureWitness: TenureWitness | undefined;
}

const NODE_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const PREFIX = /^\/[A-Za-z0-9._\-/]{0,255}$/;

/** A default node id: `<hostname>-<pid>-<6 hex>`, sanitised to the node-id alphabet. */
export function defaultNodeId(): string {
  const host =
    hostname()
      .replace(/[^A-Za-z0-9._:-]/g, '-')
      .slice(0, 64) || 'host';
  return `${host}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/** Parses `"first-last"` (or a single `"n"`) into a {@link WorkerRange}; throws {@link LeaseConfigError}. */
export function parseWorkerRange(text: string): WorkerRange {
  const m = /^\s*(\d{1,6})\s*(?:-\s*(\d{1,6})\s*)?$/.exec(text);
  if (m === null) throw new LeaseConfigError([`workers must look like "0-127" or "5", got ${JSON.stringify(text)}`]);
  const first = Number(m[1]);
  const last = m[2] === undefined ? first : Number(m[2]);
  return { first, last };
}

function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v);
}

function describe(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : String(v);
}

/** What is wrong with an etcd key prefix (`/idgen`, `/a/b`, or `/`), or `undefined` when nothing is. */
export function checkPrefix(prefix: unknown): string | undefined {
  if (
    typeof prefix !== 'string' ||
    !PREFIX.test(prefix) ||
    (prefix.length > 1 && prefix.endsWith('/')) ||
    prefix.includes('//')
  ) {
    return `prefix must start with "/", not end with "/", and use letters, digits, "._-/", got ${describe(prefix)}`;
  }
  return undefined;
}

/** A problem with connection options, and the option it is about (for a tool to name the flag that set it). */
export interface ConnectionProblem {
  readonly option: 'endpoints' | 'prefix' | 'auth' | 'tls';
  readonly message: string;
}

/** The connection part checked: endpoints without a trailing `/`, the prefix, and every problem found. */
export function checkConnection(o: EtcdConnectionOptions): {
  endpoints: string[];
  prefix: string;
  problems: ConnectionProblem[];
} {
  const endpoints: string[] = [];
  const problems: ConnectionProblem[] = [];
  const problem = (option: ConnectionProblem['option'], message: string): number => problems.push({ option, message });
  if (!Array.isArray(o.endpoints) || o.endpoints.length === 0) {
    problem('endpoints', 'endpoints must list at least one etcd client URL (http://host:port)');
  } else {
    for (const e of o.endpoints as unknown[]) {
      let ok = false;
      if (typeof e === 'string') {
        try {
          const url = new URL(e);
          ok =
            (url.protocol === 'http:' || url.protocol === 'https:') &&
            url.hostname !== '' &&
            url.port !== '' &&
            (url.pathname === '/' || url.pathname === '') &&
            url.search === '' &&
            url.username === '';
        } catch {
          ok = false;
        }
      }
      if (ok) endpoints.push((e as string).replace(/\/$/, ''));
      else problem('endpoints', `endpoint ${describe(e)} is not an etcd client URL like http://127.0.0.1:2379`);
    }
  }
  const prefix = o.prefix ?? DEFAULT_PREFIX;
  const prefixProblem = checkPrefix(prefix);
  if (prefixProblem !== undefined) problem('prefix', prefixProblem);
  if (o.auth !== undefined) {
    if (typeof o.auth.username !== 'string' || o.auth.username === '' || typeof o.auth.password !== 'string') {
      problem('auth', 'auth needs a non-empty username and a password string');
    }
  }
  if (o.tls !== undefined && endpoints.some((e) => e.startsWith('http:'))) {
    problem('tls', 'tls is set but an endpoint uses http://; use https:// endpoints with tls');
  }
  return { endpoints, prefix, problems };
}

/** The connection options, validated (used by the discovery reader too). */
export function resolveConnection(o: EtcdConnectionOptions): { endpoints: string[]; prefix: string } {
  const { endpoints, prefix, problems } = checkConnection(o);
  if (problems.length > 0) throw new LeaseConfigError(problems.map((p) => p.message));
  return { endpoints, prefix };
}

/**
 * Validates and defaults every option before any I/O (docs/design.md §5 boot step 1). Throws one
 * {@link LeaseConfigError} listing every bad value.
 */
export function resolveLeaseConfig(o: EtcdLeaseOptions): LeaseConfig {
  const connection = checkConnection(o);
  const { endpoints, prefix } = connection;
  const problems = connection.problems.map((p) => p.message);
  const layout = o.layout ?? DEFAULT_LAYOUT;
  const inRegion = (r: unknown): boolean => isInt(r) && r >= 0 && r <= layout.maxRegion;
  if (!inRegion(o.region))
    problems.push(`region must be an integer from 0 to ${layout.maxRegion}, got ${describe(o.region)}`);
  const borrowSpare = o.borrowSpare ?? false;
  if (typeof borrowSpare !== 'boolean')
    problems.push(`borrowSpare must be true or false, got ${describe(borrowSpare)}`);
  else if (borrowSpare && (o.kind ?? 'service') !== 'embedded') {
    problems.push(
      'borrowSpare is for embedded callers (kind "embedded"): a serving node on a borrowed code would register under it',
    );
  }
  let registry: RegistryConnection | undefined;
  if (o.registry !== undefined) {
    const r = checkConnection(o.registry);
    for (const p of r.problems) problems.push(`registry: ${p.message}`);
    registry = {
      endpoints: r.endpoints,
      tls: o.registry.tls,
      auth: o.registry.auth,
      prefix: r.prefix === '/' ? '' : r.prefix,
    };
  } else if (borrowSpare === true) {
    problems.push(
      'borrowSpare needs registry (the spare-code registry every spare command names): each loan is confirmed there before a claim under it (docs/design.md §7)',
    );
  }
  let workers: WorkerRange = { first: 0, last: layout.maxWorker };
  if (typeof o.workers === 'string') {
    try {
      workers = parseWorkerRange(o.workers);
    } catch (e) {
      problems.push(...(e as LeaseConfigError).problems);
    }
  } else if (o.workers !== undefined) workers = o.workers;
  if (
    !isInt(workers.first) ||
    !isInt(workers.last) ||
    workers.first < 0 ||
    workers.last > layout.maxWorker ||
    workers.first > workers.last
  ) {
    problems.push(
      `workers must be a range within 0-${layout.maxWorker} with first ≤ last, got ${describe(workers.first)}-${describe(workers.last)}`,
    );
  }
  const kind = o.kind ?? 'service';
  if (kind !== 'service' && kind !== 'embedded')
    problems.push(`kind must be "service" or "embedded", got ${describe(kind)}`);
  const nodeId = o.nodeId ?? defaultNodeId();
  if (typeof nodeId !== 'string' || !NODE_ID.test(nodeId)) {
    problems.push(`nodeId must be 1-128 letters, digits or "._:-", got ${describe(nodeId)}`);
  }
  const address = o.address ?? '';
  if (typeof address !== 'string') problems.push('address must be a string host:port');

  const ttlSeconds = o.ttlSeconds ?? DEFAULT_TTL_SECONDS;
  const ttlOk = isInt(ttlSeconds) && ttlSeconds >= MIN_TTL_SECONDS && ttlSeconds <= MAX_TTL_SECONDS;
  if (!ttlOk) {
    problems.push(
      `ttlSeconds must be a whole number of seconds from ${MIN_TTL_SECONDS} to ${MAX_TTL_SECONDS}, got ${describe(ttlSeconds)}`,
    );
  }
  const ttlMs = ttlSeconds * 1000;
  // Every TTL/3, at most every 2 s (docs/design.md §3): a short TTL still fits a keep-alive and its timeout
  // inside TTL minus the fence margin.
  const interval =
    o.keepAliveIntervalMs ??
    (ttlOk ? Math.min(DEFAULT_KEEPALIVE_INTERVAL_MS, Math.floor(ttlMs / 3)) : DEFAULT_KEEPALIVE_INTERVAL_MS);
  if (!isInt(interval) || interval < 50)
    problems.push(`keepAliveIntervalMs must be an integer ≥ 50, got ${describe(interval)}`);
  const timeout = o.keepAliveTimeoutMs ?? Math.floor((interval * 3) / 4);
  if (!isInt(timeout) || timeout < 10 || timeout >= interval) {
    problems.push(
      `keepAliveTimeoutMs must be an integer from 10 to below the interval (${describe(interval)}), got ${describe(timeout)}`,
    );
  }
  const margin = o.fenceMarginMs ?? DEFAULT_FENCE_MARGIN_MS;
  if (!isInt(margin) || margin < 0 || (ttlOk && margin >= ttlMs)) {
    problems.push(`fenceMarginMs must be an integer from 0 to below the TTL (${ttlMs} ms), got ${describe(margin)}`);
  }
  // A healthy loop must get each ack before the deadline the previous ack set, or it fences with etcd fine.
  if (
    ttlOk &&
    isInt(interval) &&
    isInt(timeout) &&
    isInt(margin) &&
    margin < ttlMs &&
    interval + timeout >= ttlMs - margin
  ) {
    problems.push(
      `keepAliveIntervalMs + keepAliveTimeoutMs (${interval} + ${timeout}) must be below TTL − fenceMarginMs ` +
        `(${ttlMs} − ${margin}), or a healthy lease would fence between keep-alives`,
    );
  }
  const clockBound = o.clockBoundMs ?? DEFAULT_CLOCK_BOUND_MS;
  if (!isInt(clockBound) || clockBound < 0 || clockBound > 60_000)
    problems.push(`clockBoundMs must be an integer from 0 to 60000, got ${describe(clockBound)}`);
  const requestTimeout = o.requestTimeoutMs ?? LEASE_DEFAULTS.requestTimeoutMs;
  if (!isInt(requestTimeout) || requestTimeout < 10)
    problems.push(`requestTimeoutMs must be an integer ≥ 10, got ${describe(requestTimeout)}`);
  const backoffInitial = o.backoff?.initialMs ?? LEASE_DEFAULTS.backoffInitialMs;
  const backoffMax = o.backoff?.maxMs ?? LEASE_DEFAULTS.backoffMaxMs;
  if (!isInt(backoffInitial) || !isInt(backoffMax) || backoffInitial < 1 || backoffMax < backoffInitial) {
    problems.push(`backoff must have 1 ≤ initialMs ≤ maxMs, got ${describe(backoffInitial)}..${describe(backoffMax)}`);
  }
  const waitForFreeSlot = o.waitForFreeSlot ?? false;
  if (typeof waitForFreeSlot !== 'boolean')
    problems.push(`waitForFreeSlot must be true or false, got ${describe(waitForFreeSlot)}`);
  if (problems.length > 0) throw new LeaseConfigError(problems);
  return {
    endpoints,
    tls: o.tls,
    auth: o.auth,
    prefix: prefix === '/' ? '' : prefix,
    region: o.region,
    borrowSpare: borrowSpare === true,
    registry,
    workers,
    kind,
    nodeId,
    address,
    ttlMs,
    ttlSeconds,
    keepAliveIntervalMs: interval,
    keepAliveTimeoutMs: timeout,
    fenceMarginMs: margin,
    clockBoundMs: clockBound,
    requestTimeoutMs: requestTimeout,
    backoffInitialMs: backoffInitial,
    backoffMaxMs: backoffMax,
    waitForFreeSlot,
    layout,
    clock: o.clock ?? systemClock,
    logger: o.logger ?? silentLogger,
    tenureWitness: o.tenureWitness,
  };
}
