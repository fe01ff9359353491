import { randomUUID } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import { deadlineIn, firstKey, rangeValue, withTimeout } from './etcd-client.js';
import { CorruptRecordError, LeaseError } from './errors.js';
import { parseJsonObject } from './records.js';
import { SpareRegistryCallError } from './spare-registry.js';
import type { RegistryIdentity, RegistryIo, SpareRegistryEntry } from './spare-registry.js';
import type { SpareCodeEntry } from './spare-code-records.js';

/**
 * The spare-code registry's identity and history (docs/design.md §7, "Registry threats").
 *
 * A registry is named by two things: its etcd's cluster ID (from every answer's header) and a deployment ID that
 * `idgen spare init` writes once into `{registry-prefix}/spare-registry/deployment`. Another etcd, or the same etcd
 * initialised again after a wipe, is another registry: a lend decided there could hand out a code the first one lent.
 *
 * Every region's etcd remembers the registry it follows and the highest registry revision it has seen, in
 * `{prefix}/spare-registry/seen` (the region etcd's own key, written by the spare-code steps with the spare-code
 * admin's role, which may write `{prefix}/spare-registry/`). A registry restored from a backup answers with a lower
 * revision than a region has seen, or lacks a record a region's mirror follows: its history went back, and it is
 * refused for lend, reclaim and adopt until `idgen spare reconcile` rebuilds it from the regions' mirrors.
 */

/** `{registry-prefix}/spare-registry/deployment`, in the registry: written once by `idgen spare init`. */
export interface RegistryDeploymentRecord {
  /** A random ID made at init: the same etcd wiped and initialised again is another registry. */
  readonly deploymentId: string;
  readonly at: string;
  /** When `idgen spare reconcile` last rebuilt the registry from the regions' mirrors (ISO-8601), if ever. */
  readonly reconciledAt?: string;
  /**
   * The deployment's loan term (docs/design.md §7, "Loan terms"), pinned by `idgen spare init --loan-term`: how far a
   * borrower's renewal moves a loan's `untilMs` on. Absent: {@link DEFAULT_LOAN_TERM_MS}.
   */
  readonly loanTermMs?: number;
}

/**
 * The default loan term: 10 minutes. It bounds how long adopt waits after a reclaim, and how long a borrowed slot
 * outlives a registry its holder cannot reach (a term less one TTL); a node may borrow only when its TTL is at most a
 * quarter of it, so renewals every quarter term keep two TTLs of it ahead of every claim.
 */
export const DEFAULT_LOAN_TERM_MS = 600_000;

/** The deployment's loan term, as the registry's deployment record pins it. */
export function loanTermOf(record: RegistryDeploymentRecord): number {
  return record.loanTermMs ?? DEFAULT_LOAN_TERM_MS;
}

/** A deployment's registry as a region follows it: the etcd cluster, the prefix there, and the deployment ID. */
export interface DeploymentRegistry extends RegistryIdentity {
  readonly deploymentId: string;
}

/** `{prefix}/spare-registry/seen`, in a region's etcd: the registry it follows and the highest revision it saw. */
export interface RegistrySeenRecord {
  readonly registry: DeploymentRegistry;
  /** The highest registry revision any spare-code step reported to this etcd (decimal). */
  readonly revision: string;
  readonly at: string;
}

/** The keys of the registry's identity and of a region's memory of it. */
export const registryMetaKeys = {
  deployment: (registryPrefix: string) => `${registryPrefix}/spare-registry/deployment`,
  seen: (prefix: string) => `${prefix}/spare-registry/seen`,
} as const;

/** Why a registry is refused: not initialised, another one than the deployment's, rewound, or a mirror says otherwise. */
export type RegistryRefusal = 'uninitialised' | 'other-registry' | 'rewound' | 'conflict';

/**
 * The registry may not decide this step: it was never initialised, it is not the registry the regions follow, its
 * history went back (restored from a backup), or a region's mirror contradicts it. Never retryable: an operator acts
 * (`idgen spare init`, the right `--registry`, or `idgen spare reconcile`; docs/runbook.md "Restoring the registry").
 */
export class RegistryRefusedError extends LeaseError {
  constructor(
    readonly refusal: RegistryRefusal,
    message: string,
  ) {
    super('spare-code', message, false);
    this.name = 'RegistryRefusedError';
  }
}

/** Whether `e` is a {@link RegistryRefusedError} (by name and code, so two copies of the package agree). */
export function isRegistryRefusedError(e: unknown): e is RegistryRefusedError {
  return e instanceof LeaseError && e.name === 'RegistryRefusedError' && 'refusal' in e;
}

function str(o: Record<string, unknown>, field: string, key: string, raw: string): string {
  const v = o[field];
  if (typeof v !== 'string' || v === '') throw new CorruptRecordError(key, `field ${field} is not a string`, raw);
  return v;
}

/** Parses `{registry-prefix}/spare-registry/deployment`. */
export function parseRegistryDeployment(key: string, raw: string): RegistryDeploymentRecord {
  const o = parseJsonObject(key, raw);
  const reconciledAt = o['reconciledAt'];
  const loanTermMs = o['loanTermMs'];
  if (
    loanTermMs !== undefined &&
    (typeof loanTermMs !== 'number' || !Number.isSafeInteger(loanTermMs) || loanTermMs < 1000)
  )
    throw new CorruptRecordError(key, 'field loanTermMs is not a whole number of milliseconds of at least 1000', raw);
  return {
    deploymentId: str(o, 'deploymentId', key, raw),
    at: typeof o['at'] === 'string' ? o['at'] : '',
    ...(typeof reconciledAt === 'string' ? { reconciledAt } : {}),
    ...(loanTermMs === undefined ? {} : { loanTermMs }),
  };
}

/** Parses `{prefix}/spare-registry/seen`. */
export function parseRegistrySeen(key: string, raw: string): RegistrySeenRecord {
  const o = parseJsonObject(key, raw);
  const g = o['registry'];
  if (typeof g !== 'object' || g === null)
    throw new CorruptRecordError(key, 'field registry needs strings clusterId, prefix and deploymentId', raw);
  const r = g as Record<string, unknown>;
  const registry: DeploymentRegistry = {
    clusterId: str(r, 'clusterId', key, raw),
    prefix: typeof r['prefix'] === 'string' ? r['prefix'] : '',
    deploymentId: str(r, 'deploymentId', key, raw),
  };
  const revision = str(o, 'revision', key, raw);
  if (!/^[0-9]+$/.test(revision)) throw new CorruptRecordError(key, 'field revision is not a decimal revision', raw);
  return { registry, revision, at: typeof o['at'] === 'string' ? o['at'] : '' };
}

/** The registry as it answered now: who it is and its current revision. */
export interface RegistryNow {
  readonly identity: DeploymentRegistry;
  readonly record: RegistryDeploymentRecord;
  /** The registry etcd's revision in this answer (every later answer is at or above it, unless it is restored). */
  readonly revision: string;
  /** The deployment record's mod revision (what reconcile compares). */
  readonly modRevision: string;
}

function where(io: RegistryIo): string {
  return io.name === undefined ? 'the spare-code registry' : `the spare-code registry (${io.name})`;
}

async function call<T>(io: RegistryIo, what: string, p: () => Promise<T>): Promise<T> {
  try {
    return await withTimeout(p(), io.timeoutMs, what);
  } catch (e) {
    throw new SpareRegistryCallError(`${where(io)}: ${(e as Error).message ?? String(e)}`, e);
  }
}

/** Same as decimal comparison of two etcd revisions (strings of digits). */
export function revisionBelow(a: string, b: string): boolean {
  return BigInt(a) < BigInt(b);
}

/**
 * `idgen spare init`: gives the registry its deployment ID and pins its loan term, once (create only if absent). Run
 * again, it changes nothing and returns the record there.
 */
export async function initRegistry(
  io: RegistryIo,
  o: { now?: () => number; deploymentId?: string; loanTermMs?: number } = {},
): Promise<{ now: RegistryNow; changed: boolean }> {
  const key = registryMetaKeys.deployment(io.prefix);
  const record: RegistryDeploymentRecord = {
    deploymentId: o.deploymentId ?? randomUUID(),
    at: new Date((o.now ?? Date.now)()).toISOString(),
    loanTermMs: o.loanTermMs ?? DEFAULT_LOAN_TERM_MS,
  };
  const res = await call(io, `registry init on ${key}`, () =>
    io.client
      .if(key, 'Create', '==', 0)
      .then(io.client.put(key).value(JSON.stringify(record)))
      .else(io.client.get(key))
      .options(deadlineIn(io.timeoutMs))
      .commit(),
  );
  const clusterId = res.header.cluster_id;
  if (res.succeeded)
    return {
      now: {
        identity: { clusterId, prefix: io.prefix, deploymentId: record.deploymentId },
        record,
        revision: res.header.revision,
        modRevision: res.header.revision,
      },
      changed: true,
    };
  const raw = rangeValue(res.responses[0]);
  if (raw === undefined) throw new RegistryRefusedError('uninitialised', `${key} vanished meanwhile; run init again`);
  const existing = parseRegistryDeployment(key, raw);
  return {
    now: {
      identity: { clusterId, prefix: io.prefix, deploymentId: existing.deploymentId },
      record: existing,
      revision: res.header.revision,
      modRevision: res.responses[0]?.response_range?.kvs[0]?.mod_revision ?? res.header.revision,
    },
    changed: false,
  };
}

/** Reads the registry's identity and current revision; a registry never initialised is refused. */
export async function readRegistryNow(io: RegistryIo): Promise<RegistryNow> {
  const key = registryMetaKeys.deployment(io.prefix);
  const res = await call(io, `reading ${key}`, () => io.client.get(key).options(deadlineIn(io.timeoutMs)).exec());
  const read = firstKey(res.kvs);
  if (read === undefined)
    throw new RegistryRefusedError(
      'uninitialised',
      `${where(io)} has no deployment ID (${key} is absent): run "idgen spare init" against the deployment's ` +
        'registry once; if it had one, this etcd is another registry or was wiped or restored to before its init ' +
        '(docs/runbook.md "Restoring the registry")',
    );
  const record = parseRegistryDeployment(key, read.value);
  return {
    identity: { clusterId: res.header.cluster_id, prefix: io.prefix, deploymentId: record.deploymentId },
    record,
    revision: res.header.revision,
    modRevision: read.modRevision,
  };
}

/** A region's etcd as the registry checks see it. */
export interface RegionEtcd {
  readonly client: Etcd3;
  readonly prefix: string;
  readonly timeoutMs: number;
  /** How to name it in a refusal (its URLs, or the deployment file's region name). */
  readonly name: string;
}

/** Reads a region's memory of the registry; `undefined` when it has none yet. */
export async function readRegistrySeen(
  io: RegionEtcd,
): Promise<{ record: RegistrySeenRecord; modRevision: string } | undefined> {
  const key = registryMetaKeys.seen(io.prefix);
  const r = await withTimeout(
    io.client.get(key).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `reading ${key} in ${io.name}`,
  );
  const read = firstKey(r.kvs);
  if (read === undefined) return undefined;
  return { record: parseRegistrySeen(key, read.value), modRevision: read.modRevision };
}

/**
 * Raises a region's memory of the registry to `revision` (never lowers it), compared on its mod revision. The same
 * registry only: a region that follows another refuses it (`other-registry`; a spare step is refused by
 * {@link checkRegistryHistory} before this runs, and `idgen spare init` of a second registry here, as an operator cut
 * off the first might type during a split, is refused by this). `force` (reconcile's) moves it to `identity`.
 */
export async function noteRegistrySeen(
  io: RegionEtcd,
  identity: DeploymentRegistry,
  revision: string,
  o: { now?: () => number; force?: boolean } = {},
): Promise<void> {
  const key = registryMetaKeys.seen(io.prefix);
  for (let attempt = 0; attempt < 5; attempt++) {
    const found = await readRegistrySeen(io);
    if (o.force !== true && found !== undefined && !sameRegistry(found.record.registry, identity))
      throw otherRegistry(io, found.record.registry, identity);
    if (
      o.force !== true &&
      found !== undefined &&
      sameRegistry(found.record.registry, identity) &&
      !revisionBelow(found.record.revision, revision)
    )
      return;
    const record: RegistrySeenRecord = {
      registry: identity,
      revision,
      at: new Date((o.now ?? Date.now)()).toISOString(),
    };
    const cmp =
      found === undefined ? io.client.if(key, 'Create', '==', 0) : io.client.if(key, 'Mod', '==', found.modRevision);
    const res = await withTimeout(
      cmp
        .then(io.client.put(key).value(JSON.stringify(record)))
        .options(deadlineIn(io.timeoutMs))
        .commit(),
      io.timeoutMs,
      `writing ${key} in ${io.name}`,
    );
    if (res.succeeded) return;
  }
  throw new RegistryRefusedError('conflict', `${key} in ${io.name} kept changing; run the step again`);
}

/**
 * `idgen spare init`'s record of the registry in every region of the deployment file: refused (`other-registry`) before
 * anything is written when any of them follows another registry; then {@link noteRegistrySeen} in each.
 */
export async function noteRegistrySeenInAll(
  regions: readonly RegionEtcd[],
  identity: DeploymentRegistry,
  revision: string,
  o: { now?: () => number } = {},
): Promise<void> {
  for (const r of regions) {
    const found = await readRegistrySeen(r);
    if (found !== undefined && !sameRegistry(found.record.registry, identity))
      throw otherRegistry(r, found.record.registry, identity);
  }
  for (const r of regions) await noteRegistrySeen(r, identity, revision, o);
}

function otherRegistry(
  io: RegionEtcd,
  follows: DeploymentRegistry,
  identity: DeploymentRegistry,
): RegistryRefusedError {
  return new RegistryRefusedError(
    'other-registry',
    `${io.name} follows the spare-code registry of ${describeIdentity(follows)}, not this one ` +
      `(${describeIdentity(identity)}): a deployment has one registry; to move it to another etcd, run "idgen ` +
      'spare reconcile" there with the deployment file (docs/runbook.md "Restoring the registry")',
  );
}

/** Whether two identities name the same registry. */
export function sameRegistry(a: DeploymentRegistry, b: DeploymentRegistry): boolean {
  return a.clusterId === b.clusterId && a.prefix === b.prefix && a.deploymentId === b.deploymentId;
}

function describeIdentity(r: RegistryIdentity & { deploymentId?: string }): string {
  return `cluster ${r.clusterId}, prefix ${r.prefix}${r.deploymentId === undefined ? '' : `, deployment ${r.deploymentId}`}`;
}

/** What one region holds about the registry: its memory, its binding's code and its mirrors. */
export interface RegionRegistryView {
  readonly name: string;
  /** The region code its binding names; `undefined` when unbound or unreadable. */
  readonly code: number | undefined;
  readonly seen: RegistrySeenRecord | undefined;
  readonly mirrors: readonly SpareCodeEntry[];
}

/**
 * The registry's identity and history against every region read (pure). Refuses with one line:
 * - `other-registry`: a region follows another registry (its memory, or a mirror's `registry`, names another cluster,
 *   prefix or deployment ID);
 * - `rewound`: a region saw a higher registry revision than the registry answers with now, or a mirror follows a
 *   registry record the registry no longer has (absent, or at a lower mod revision).
 */
export function checkRegistryHistory(
  now: RegistryNow,
  codes: readonly SpareRegistryEntry[],
  regions: readonly RegionRegistryView[],
): void {
  const byCode = new Map(codes.map((c) => [c.record.code, c]));
  const reconcile =
    'run "idgen spare reconcile" with the deployment file to rebuild it from the regions\' mirrors (docs/runbook.md "Restoring the registry")';
  for (const v of regions) {
    const seen = v.seen;
    if (seen !== undefined && !sameRegistry(seen.registry, now.identity))
      throw new RegistryRefusedError(
        'other-registry',
        `${v.name} follows the spare-code registry of ${describeIdentity(seen.registry)}, not this one ` +
          `(${describeIdentity(now.identity)}): a deployment has one registry; give every spare command the same --registry`,
      );
    for (const m of v.mirrors) {
      const g = m.record.registry;
      if (g !== undefined && (g.clusterId !== now.identity.clusterId || g.prefix !== now.identity.prefix))
        throw new RegistryRefusedError(
          'other-registry',
          `${m.key} in ${v.name} follows the spare-code registry of ${describeIdentity(g)}, not this one ` +
            `(${describeIdentity(now.identity)}): a deployment has one registry; give every spare command the same --registry`,
        );
    }
    if (seen !== undefined && revisionBelow(now.revision, seen.revision))
      throw new RegistryRefusedError(
        'rewound',
        `the spare-code registry answers at revision ${now.revision}, but ${v.name} saw it at revision ` +
          `${seen.revision}: its history went back (restored from a backup?); ${reconcile}`,
      );
    for (const m of v.mirrors) {
      const r = m.record.registryRevision;
      if (r === undefined || m.record.registry === undefined) continue;
      const there = byCode.get(m.record.code);
      if (there === undefined || revisionBelow(there.modRevision, r))
        throw new RegistryRefusedError(
          'rewound',
          `${m.key} in ${v.name} (${m.record.state}) follows registry revision ${r}, but the registry ` +
            `${there === undefined ? 'has no record of code ' + String(m.record.code) : `record of code ${m.record.code} is at ${there.modRevision}`}: ` +
            `its history went back (restored from a backup?); ${reconcile}`,
        );
    }
  }
}

/** The step a conflict check is for: which code, and who may hold a mirror of it. */
export type RegistryStep =
  | { readonly kind: 'lend'; readonly code: number; readonly toRegion: number }
  | { readonly kind: 'reclaim'; readonly code: number; readonly lentTo: number }
  | { readonly kind: 'adopt'; readonly code: number; readonly lentTo: number; readonly adopter: number };

/**
 * A region's mirror that contradicts the step about to be written (pure): a lend finds the code mirrored anywhere but
 * as the same loan in the borrower's own etcd; a reclaim finds it lent to another region or adopted anywhere; an adopt
 * finds it still lent or being reclaimed anywhere, or adopted by another region.
 */
export function conflictingMirror(step: RegistryStep, regions: readonly RegionRegistryView[]): void {
  for (const v of regions) {
    const m = v.mirrors.find((e) => e.record.code === step.code);
    if (m === undefined) continue;
    const r = m.record;
    const says = r.state === 'adopted' ? 'adopted' : `${r.state} (lent to region ${r.lentTo})`;
    let ok: boolean;
    switch (step.kind) {
      case 'lend':
        ok = r.state === 'lent' && r.lentTo === step.toRegion && v.code === step.toRegion;
        break;
      case 'reclaim':
        ok = r.state !== 'adopted' && r.lentTo === step.lentTo && v.code === step.lentTo;
        break;
      case 'adopt':
        ok = r.state === 'adopted' ? v.code === step.adopter : r.state === 'reclaimed' && r.lentTo === step.lentTo;
        break;
    }
    if (!ok)
      throw new RegistryRefusedError(
        'conflict',
        `${m.key} in ${v.name} says spare code ${step.code} is ${says}, which contradicts this ${step.kind}: the ` +
          'registry and the regions disagree (a restored etcd?); nothing written (docs/runbook.md "Restoring the registry")',
      );
  }
}
