import type { Etcd3 } from 'etcd3';
import type { Layout, LayoutRecord } from '@idgen/core';
import { deadlineIn, sleep, withTimeout } from './etcd-client.js';
import { LEASE_DEFAULTS } from './config.js';
import { CorruptRecordError } from './errors.js';
import { computeFloor, leaseKeys, parseLastMsRecord, parseLayoutRecord } from './records.js';
import type { LastMsRecord } from './records.js';
import { checkRegionBinding } from './region-binding.js';
import {
  DEFAULT_REGIONS_IN_USE,
  SpareCodeError,
  getKey,
  getPrefix,
  heldSlotsUnder,
  isInt,
  listSpareCodes,
  parseSpareCodeRecord,
  readSpareCode,
  readSpareCodesLeniently,
  readSpareSet,
  spareCodesOf,
  spareKeys,
} from './spare-code-records.js';
import type { Io, SpareCodeEntry, SpareCodeLoan, SpareCodeRecord } from './spare-code-records.js';
import { guardRegistryStep } from './registry-guard.js';
import { loanTermOf } from './registry-identity.js';
import { readTtlCeiling } from './ttl-ceiling.js';
import type { WithDeployment } from './registry-guard.js';
import { casRegistryCode, describeRegistry, newLoanTimes, readRegistryCode, renewLoanTerm } from './spare-registry.js';
import type {
  RegistryHandover,
  RegistryIdentity,
  RegistryIo,
  SpareRegistryEntry,
  SpareRegistryRecord,
} from './spare-registry.js';
// The records and their reads live in ./spare-code-records.ts (a leaf the registry guard reads too); named here as well.
export {
  DEFAULT_REGIONS_IN_USE,
  SpareCodeError,
  heldSlotsUnder,
  listSpareCodes,
  parseSpareCodeRecord,
  readSpareCode,
  readSpareCodesLeniently,
  spareCodesOf,
  spareKeys,
};
export type {
  SpareCodeAdoption,
  SpareCodeEntry,
  SpareCodeLoan,
  SpareCodeRecord,
  SpareCodeState,
} from './spare-code-records.js';

export async function checkRegionCode(
  client: Etcd3,
  prefix: string,
  region: number,
  o: { layout: Layout; timeoutMs?: number },
): Promise<void> {
  const io: Io & { layout: Layout } = {
    client,
    prefix,
    timeoutMs: o.timeoutMs ?? LEASE_DEFAULTS.requestTimeoutMs,
    layout: o.layout,
  };
  const entry = await readSpareCode(io, region);
  if (entry !== undefined) {
    const r = entry.record;
    if (r.state === 'adopted') return;
    throw new SpareCodeError(
      `region code ${region} is a spare code this etcd lent to region ${r.lentTo} (${entry.key} says ${r.state}): ` +
        `no node may run on it here; its IDs belong to region ${r.lentTo}'s borrowers (docs/design.md §7)`,
    );
  }
  const { codes } = await readSpareSet(io, o.layout);
  if (codes.includes(region)) {
    throw new SpareCodeError(
      `region code ${region} is a spare code (spare codes ${codes.join(', ')}) and this etcd has no adoption record ${spareKeys.code(prefix, region)}: ` +
        `run "idgen spare adopt ${region} --handover FILE" against this etcd before the region's first node starts (docs/runbook.md)`,
    );
  }
}

/**
 * The registry a lend, reclaim or adopt is decided in first (docs/design.md §7), and the deployment's other regions,
 * whose memory of the registry and mirrors are checked before anything is written (./registry-guard.ts).
 */
export interface WithRegistry extends WithDeployment {
  readonly registry: RegistryIo;
}

/**
 * One registry per deployment (docs/design.md §7): a region's etcd whose mirrors follow one registry refuses a step
 * decided in another (another etcd cluster, or another prefix), since two registries could each lend a code once.
 * Read before this etcd is written; records written before the registry's identity was recorded pass.
 */
async function checkOneRegistry(io: Io & { layout: Layout }, reg: SpareRegistryEntry): Promise<void> {
  const { entries } = await readSpareCodesLeniently(io);
  const other = entries.find(
    (e) =>
      e.record.registry !== undefined &&
      (e.record.registry.clusterId !== reg.registry.clusterId || e.record.registry.prefix !== reg.registry.prefix),
  );
  if (other?.record.registry !== undefined)
    throw new SpareCodeError(
      `${other.key} follows the spare-code registry in etcd cluster ${other.record.registry.clusterId} (prefix ` +
        `${other.record.registry.prefix}), not this one (cluster ${reg.registry.clusterId}, prefix ${reg.registry.prefix}): ` +
        'a deployment has one registry; give every spare command the same --registry',
    );
}

/** Refuses a step the registry does not allow, naming who holds the code there. */
function registrySays(entry: SpareRegistryEntry, what: string): SpareCodeError {
  return new SpareCodeError(
    `spare code ${entry.record.code} is ${describeRegistry(entry.record)} (${entry.key} in the spare-code registry, ` +
      `since ${entry.record.at}): ${what}`,
  );
}

/** What a lend did: the mirror, whether it wrote it, and from when its borrowers may first claim (a new loan). */
export interface LendResult {
  readonly record: SpareCodeRecord;
  readonly changed: boolean;
  /** From this wall-clock millisecond on, borrowers may claim under the loan (absent: at once). */
  readonly usableFromMs?: number;
}

/**
 * `idgen spare lend`: decided in the registry first (created only if absent: a code is lent once, deployment-wide),
 * then mirrored into the borrowing region's etcd (`lent`, with the registry's mod revision). The same loan again
 * changes nothing, or completes a mirror an interrupted lend left out; any other holder in the registry is refused,
 * and then nothing is written to this etcd.
 */
export async function lendSpareCode(
  io: Io & WithRegistry & { layout: Layout; now?: () => number },
  code: number,
  toRegion: number,
): Promise<LendResult> {
  if (toRegion < 0 || toRegion > io.layout.maxRegion)
    throw new SpareCodeError(`region ${toRegion} is not a region code 0-${io.layout.maxRegion}`);
  // A loan is recorded in the borrowing region's own etcd, never another's (docs/design.md §5, region binding).
  await checkRegionBinding(io, toRegion);
  const { codes } = await readSpareSet(io, io.layout);
  if (!codes.includes(code))
    throw new SpareCodeError(
      `region code ${code} is not a spare code (spare codes: ${codes.join(', ') || 'none'}; the layout record's spareCodes)`,
    );
  if (codes.includes(toRegion))
    throw new SpareCodeError(`region ${toRegion} is itself a spare code: lend to a region in use`);
  const existing = await readSpareCode(io, code);
  if (existing !== undefined) {
    const r = existing.record;
    if (!(r.state === 'lent' && r.lentTo === toRegion))
      throw new SpareCodeError(
        `spare code ${code} is already recorded here as ${r.state}${r.state === 'adopted' ? '' : ` (lent to region ${r.lentTo})`} (${existing.key}); ` +
          'a code is lent once: after a reclaim it belongs to the region that adopts it',
      );
  } else {
    const held = await heldSlotsUnder(io, code);
    if (held.length > 0) {
      throw new SpareCodeError(
        `slots under code ${code} are held in this etcd (workers ${held.map((h) => h.worker).join(', ')}): something runs on it already`,
      );
    }
  }
  // 0. The registry is the deployment's, has not gone back, and no region mirrors the code otherwise.
  const guard = await guardRegistryStep(io, { kind: 'lend', code, toRegion });
  const nowMs = (io.now ?? Date.now)();
  const at = new Date(nowMs).toISOString();
  // The loan's term (docs/design.md §7, "Loan terms"): its borrowers renew it while it stands.
  const termMs = loanTermOf(guard.now.record);
  const untilMs = nowMs + termMs;
  // 1. The registry: free → lent to toRegion (create if absent); lent to toRegion already: go on (a mirror to finish).
  let reg = await readRegistryCode(io.registry, code, io.layout.maxRegion);
  if (reg === undefined) {
    // A record the registry does not have may be one it forgot (restored to before a loan): first claims wait.
    const times = newLoanTimes(nowMs, termMs, LEASE_DEFAULTS.clockBoundMs);
    const cas = await casRegistryCode(
      io.registry,
      undefined,
      { code, state: 'lent', lentTo: toRegion, at, ...times },
      io.layout.maxRegion,
    );
    reg = cas.entry;
    if (reg === undefined)
      throw new SpareCodeError(`the registry's record of code ${code} vanished meanwhile; run lend again`);
  }
  if (reg.record.state !== 'lent' || reg.record.lentTo !== toRegion)
    throw registrySays(reg, `not lent to region ${toRegion}; a code is lent once, deployment-wide`);
  await checkOneRegistry(io, reg);
  // The same loan again renews a term that ended unrenewed (no borrower ran for a term) or that it never had (a loan
  // lent before terms): the guard above read every region of the deployment, so the loan is the deployment's.
  if (reg.record.untilMs === undefined || reg.record.untilMs < untilMs - termMs / 2)
    reg = (await renewLoanTerm(io.registry, reg, untilMs)) ?? reg;
  const usable = reg.record.usableFromMs === undefined ? {} : { usableFromMs: reg.record.usableFromMs };
  // 2. The mirror in the borrowing region's etcd.
  if (existing !== undefined) {
    await guard.noteSeen(io.now);
    return { record: existing.record, changed: false, ...usable };
  }
  const key = spareKeys.code(io.prefix, code);
  const record: SpareCodeRecord = {
    code,
    state: 'lent',
    lentTo: toRegion,
    at,
    registryRevision: reg.modRevision,
    registry: reg.registry,
  };
  const res = await withTimeout(
    io.client
      .if(key, 'Create', '==', 0)
      .then(io.client.put(key).value(JSON.stringify(record)))
      .options(deadlineIn(io.timeoutMs))
      .commit(),
    io.timeoutMs,
    `lend transaction on ${key}`,
  );
  if (!res.succeeded)
    throw new SpareCodeError(`${key} was written by someone else meanwhile; look again (idgen spare list)`);
  await guard.noteSeen(io.now);
  return { record, changed: true, ...usable };
}

/**
 * `idgen spare reclaim`, step 1: `lent` → `reclaiming`, in the registry first (compared with the record read), then in
 * the lender's mirror (compared too). From the mirror's commit on no claim under the code can commit (each compares
 * its mod revision), and holders give their slots back at their next refresh. Already `reclaiming` or `reclaimed`:
 * returned as is (a registry step an interrupted reclaim left out is done first).
 */
export async function beginReclaim(
  io: Io & WithRegistry & { layout: Layout; now?: () => number },
  code: number,
): Promise<SpareCodeLoan> {
  const existing = await readSpareCode(io, code);
  if (existing === undefined)
    throw new SpareCodeError(
      `spare code ${code} is not lent from this etcd (${spareKeys.code(io.prefix, code)} is absent)`,
    );
  const r = existing.record;
  if (r.state === 'adopted')
    throw new SpareCodeError(`spare code ${code} is adopted in this etcd, not lent: nothing to reclaim here`);
  const lentTo = r.lentTo;
  await checkRegionBinding(io, lentTo);
  const guard = await guardRegistryStep(io, { kind: 'reclaim', code, lentTo });
  const at = new Date((io.now ?? Date.now)()).toISOString();
  const reg = await registryAtLeastReclaiming(io, code, lentTo, at);
  await checkOneRegistry(io, reg);
  if (r.state === 'reclaiming' || r.state === 'reclaimed') {
    await guard.noteSeen(io.now);
    return r;
  }
  const record: SpareCodeRecord = {
    code,
    state: 'reclaiming',
    lentTo,
    at,
    registryRevision: reg.modRevision,
    registry: reg.registry,
  };
  const res = await withTimeout(
    io.client
      .if(existing.key, 'Mod', '==', existing.modRevision)
      .then(io.client.put(existing.key).value(JSON.stringify(record)))
      .options(deadlineIn(io.timeoutMs))
      .commit(),
    io.timeoutMs,
    `reclaim transaction on ${existing.key}`,
  );
  if (!res.succeeded) throw new SpareCodeError(`${existing.key} changed meanwhile; run reclaim again`);
  await guard.noteSeen(io.now);
  return record;
}

/** The registry's record of a loan to `lentTo` being reclaimed: `lent` moved to `reclaiming`, or later already. */
async function registryAtLeastReclaiming(
  io: WithRegistry & { layout: Layout },
  code: number,
  lentTo: number,
  at: string,
): Promise<SpareRegistryEntry> {
  let reg = await readRegistryCode(io.registry, code, io.layout.maxRegion);
  if (reg === undefined)
    throw new SpareCodeError(
      `the spare-code registry has no record of code ${code}: this etcd's loan to region ${lentTo} is not the ` +
        `deployment's; record it first with "idgen spare lend ${code} --to-region ${lentTo} --registry …"`,
    );
  if (reg.record.lentTo !== lentTo)
    throw registrySays(reg, `this etcd's loan to region ${lentTo} is not the deployment's`);
  if (reg.record.state === 'lent') {
    const cas = await casRegistryCode(
      io.registry,
      reg,
      { code, state: 'reclaiming', lentTo, at, ...termOf(reg.record) },
      io.layout.maxRegion,
    );
    if (!cas.won || cas.entry === undefined)
      throw new SpareCodeError(`${reg.key} changed meanwhile; run reclaim again`);
    reg = cas.entry;
  }
  return reg;
}

/** One worker of a handover: the `last-ms` a new holder of the slot must respect, and what it was computed from. */
export interface HandoverWorker {
  readonly worker: number;
  /** Never mint at or below this Unix ms (written as a released `last-ms` by adopt). */
  readonly lastMs: number;
  /** The borrowers' `last-ms` record it was computed from. */
  readonly source: LastMsRecord;
}

/** The handover file: written by reclaim from the lender's etcd, read by adopt into the new region's etcd. */
export interface Handover {
  readonly format: 'idgen-spare-handover/1';
  readonly code: number;
  readonly lentTo: number;
  readonly prefix: string;
  readonly reclaimedAt: string;
  readonly layout: LayoutRecord;
  /** The TTL and clock bound the floors were computed with (the larger of these and each record's own TTL). */
  readonly ttlMs: number;
  readonly clockBoundMs: number;
  readonly workers: readonly HandoverWorker[];
}

/**
 * The `last-ms` a new holder of a borrowed slot must respect: the floor a successor in the same etcd would compute
 * (docs/design.md §5): the millisecond of a clean release, else `last-ms + TTL + clock bound`. A borrower never
 * minted above its wall ceiling, `L + TTL − margin` with `L` ≤ the record's `ms`, whatever its clock did; so every
 * ID it minted is at or below this.
 */
export function handoverLastMs(
  record: LastMsRecord,
  o: { ttlMs: number; clockBoundMs: number; epochMs: number },
): number {
  return computeFloor(record, o);
}

/**
 * `idgen spare reclaim`, step 2: once the record is `reclaiming` and no worker key is left under the code, reads every
 * `last-ms` under it, marks the mirror `reclaimed` (conditional on it being unchanged), then the registry `reclaimed`
 * with the handover's per-worker floors (what adopt compares the file with), and returns the handover. Run again, it
 * returns the same handover (refused if the floors computed now differ from the registry's).
 * Throws {@link SpareCodeError} while slots are still held (`heldSlotsUnder` says which).
 */
export async function exportHandover(
  io: Io & WithRegistry & { layout: Layout; ttlMs: number; clockBoundMs: number; now?: () => number },
  code: number,
): Promise<Handover> {
  const existing = await readSpareCode(io, code);
  if (existing === undefined) throw new SpareCodeError(`spare code ${code} is not lent from this etcd`);
  const r = existing.record;
  if (r.state !== 'reclaiming' && r.state !== 'reclaimed')
    throw new SpareCodeError(`spare code ${code} is ${r.state}: reclaim it first`);
  const lentTo = r.lentTo;
  const held = await heldSlotsUnder(io, code);
  if (held.length > 0)
    throw new SpareCodeError(
      `${held.length} slot(s) under code ${code} still held (workers ${held.map((h) => h.worker).join(', ')})`,
    );
  const layoutKey = leaseKeys.layout(io.prefix);
  const layoutRaw = (await getKey(io, layoutKey))?.value;
  const layout = layoutRaw === undefined ? io.layout.toRecord() : parseLayoutRecord(layoutKey, layoutRaw);
  const prefix = spareKeys.lastMsAll(io.prefix, code);
  const workers: HandoverWorker[] = [];
  for (const { key, read } of await getPrefix(io, prefix)) {
    const worker = Number(key.slice(prefix.length));
    if (!Number.isSafeInteger(worker) || worker < 0 || worker > io.layout.maxWorker)
      throw new CorruptRecordError(key, 'not a worker key', read.value);
    const source = parseLastMsRecord(key, read.value); // garbage: no handover (the floor is unknown)
    workers.push({
      worker,
      lastMs: handoverLastMs(source, { ttlMs: io.ttlMs, clockBoundMs: io.clockBoundMs, epochMs: layout.epochMs }),
      source,
    });
  }
  workers.sort((a, b) => a.worker - b.worker);
  let reclaimedAt = new Date((io.now ?? Date.now)()).toISOString();
  const guard = await guardRegistryStep(io, { kind: 'reclaim', code, lentTo });
  // The registry must follow this loan (reclaiming, or reclaimed by an earlier run) before this etcd is touched.
  let reg = await registryAtLeastReclaiming(io, code, lentTo, reclaimedAt);
  await checkOneRegistry(io, reg);
  const summary = handoverSummary(lentTo, reclaimedAt, workers);
  if (reg.record.handover !== undefined) {
    // An earlier run recorded the handover: this one must be the same (a file written again, not another floor).
    const why = summaryDifference(reg.record.handover, summary);
    if (why !== undefined)
      throw registrySays(
        reg,
        `its handover differs from the one computed now (${why}): run reclaim with the same --lease-ttl and --clock-bound-ms`,
      );
    reclaimedAt = reg.record.handover.reclaimedAt;
  }
  if (r.state === 'reclaiming') {
    const done: SpareCodeRecord = {
      code,
      state: 'reclaimed',
      lentTo,
      at: reclaimedAt,
      registryRevision: reg.modRevision,
      registry: reg.registry,
    };
    const res = await withTimeout(
      io.client
        .if(existing.key, 'Mod', '==', existing.modRevision)
        .then(io.client.put(existing.key).value(JSON.stringify(done)))
        .options(deadlineIn(io.timeoutMs))
        .commit(),
      io.timeoutMs,
      `marking ${existing.key} reclaimed`,
    );
    if (!res.succeeded) throw new SpareCodeError(`${existing.key} changed meanwhile; run reclaim again`);
  }
  if (reg.record.state === 'reclaiming') {
    const cas = await casRegistryCode(
      io.registry,
      reg,
      { code, state: 'reclaimed', lentTo, handover: summary, at: reclaimedAt, ...termOf(reg.record) },
      io.layout.maxRegion,
    );
    if (!cas.won || cas.entry === undefined)
      throw new SpareCodeError(`${reg.key} changed meanwhile; run reclaim again`);
    reg = cas.entry;
  }
  await guard.noteSeen(io.now);
  return {
    format: 'idgen-spare-handover/1',
    code,
    lentTo,
    prefix: io.prefix,
    reclaimedAt,
    layout,
    ttlMs: io.ttlMs,
    clockBoundMs: io.clockBoundMs,
    workers,
  };
}

function handoverSummary(lentTo: number, reclaimedAt: string, workers: readonly HandoverWorker[]): RegistryHandover {
  return {
    lentTo,
    reclaimedAt,
    workers: workers.map((w) => ({ worker: w.worker, lastMs: w.lastMs })),
    maxLastMs: workers.reduce((m, w) => Math.max(m, w.lastMs), -1),
  };
}

/** What differs between the registry's handover summary and another (a handover file's): `undefined` if nothing. */
function summaryDifference(registry: RegistryHandover, other: RegistryHandover): string | undefined {
  if (registry.lentTo !== other.lentTo) return `lent to region ${registry.lentTo}, not ${other.lentTo}`;
  if (registry.maxLastMs !== other.maxLastMs) return `maxLastMs ${registry.maxLastMs}, not ${other.maxLastMs}`;
  const mine = new Map(registry.workers.map((w) => [w.worker, w.lastMs]));
  if (mine.size !== other.workers.length) return `${mine.size} worker(s), not ${other.workers.length}`;
  for (const w of other.workers)
    if (mine.get(w.worker) !== w.lastMs)
      return `worker ${w.worker}: lastMs ${mine.get(w.worker) ?? 'none'}, not ${w.lastMs}`;
  return undefined;
}

/** Parses a handover file; anything unexpected throws {@link SpareCodeError} naming what. */
export function parseHandover(text: string, source = 'handover file'): Handover {
  let o: unknown;
  try {
    o = JSON.parse(text);
  } catch {
    throw new SpareCodeError(`${source} is not JSON`);
  }
  const bad = (what: string): never => {
    throw new SpareCodeError(`${source}: ${what}`);
  };
  if (typeof o !== 'object' || o === null) return bad('not a JSON object');
  const h = o as Record<string, unknown>;
  if (h['format'] !== 'idgen-spare-handover/1') bad('format is not "idgen-spare-handover/1"');
  for (const f of ['code', 'lentTo', 'ttlMs', 'clockBoundMs'] as const)
    if (!isInt(h[f]) || (h[f] as number) < 0) bad(`${f} is not a non-negative integer`);
  if (typeof h['layout'] !== 'object' || h['layout'] === null) bad('layout is missing');
  let layout: LayoutRecord;
  try {
    layout = parseLayoutRecord('layout', JSON.stringify(h['layout']));
  } catch (e) {
    return bad(`layout: ${(e as Error).message}`);
  }
  if (!Array.isArray(h['workers'])) bad('workers is not a list');
  const workers: HandoverWorker[] = [];
  for (const w of h['workers'] as unknown[]) {
    const x = (typeof w === 'object' && w !== null ? w : {}) as Record<string, unknown>;
    if (!isInt(x['worker']) || (x['worker'] as number) < 0)
      bad(`a worker entry has no worker number: ${JSON.stringify(w)}`);
    if (!isInt(x['lastMs']) || (x['lastMs'] as number) < 0) bad(`worker ${String(x['worker'])} has no lastMs`);
    let source: LastMsRecord;
    try {
      source = parseLastMsRecord(`worker ${String(x['worker'])} source`, JSON.stringify(x['source']));
    } catch (e) {
      return bad((e as Error).message);
    }
    workers.push({ worker: x['worker'] as number, lastMs: x['lastMs'] as number, source });
  }
  if (new Set(workers.map((w) => w.worker)).size !== workers.length) bad('a worker is listed twice');
  return {
    format: 'idgen-spare-handover/1',
    code: h['code'] as number,
    lentTo: h['lentTo'] as number,
    prefix: typeof h['prefix'] === 'string' ? h['prefix'] : '',
    reclaimedAt: typeof h['reclaimedAt'] === 'string' ? h['reclaimedAt'] : '',
    layout,
    ttlMs: h['ttlMs'] as number,
    clockBoundMs: h['clockBoundMs'] as number,
    workers,
  };
}

/** Node id written in the `last-ms` records adopt puts in the new region's etcd. */
export const HANDOVER_NODE_ID = 'spare-handover';

/**
 * `idgen spare adopt`: in the new region's etcd, before its first node starts, writes each handover worker's `last-ms`
 * (as a released record at the handover's value, never lowering one already there), then the `adopted` record
 * last, so a node that passes the boot check finds every floor in place. The adoption is decided in the registry
 * first: it must say `reclaimed` with this handover's floors, and moves to `adopted` by this etcd (cluster ID and
 * prefix); a code adopted by another etcd is refused. Refuses too when this etcd lent the code out, when a slot under
 * it is held, or when the layout differs. Adopting the same handover again changes nothing.
 */
export async function adoptSpareCode(
  io: Io & WithRegistry & { layout: Layout; now?: () => number; onTermWait?: (ms: number, until: string) => void },
  handover: Handover,
): Promise<{ record: SpareCodeRecord; written: number; changed: boolean }> {
  const code = handover.code;
  if (code < 0 || code > io.layout.maxRegion)
    throw new SpareCodeError(`handover code ${code} is not a region code 0-${io.layout.maxRegion}`);
  // Adopted into the etcd bound to the code itself: the new region's (docs/design.md §5, region binding).
  const binding = await checkRegionBinding(io, code);
  const differences = io.layout.differences(handover.layout, 'in this etcd', 'in the handover');
  const layoutKey = leaseKeys.layout(io.prefix);
  const layoutRaw = (await getKey(io, layoutKey))?.value;
  const here = layoutRaw === undefined ? undefined : parseLayoutRecord(layoutKey, layoutRaw);
  const diff =
    here === undefined ? differences : io.layout.differences(here, 'expected', 'in this etcd').concat(differences);
  if (diff.length > 0)
    throw new SpareCodeError(`the handover's layout differs from this deployment's: ${diff.join('; ')}`);
  const existing = await readSpareCode(io, code);
  if (existing !== undefined && existing.record.state !== 'adopted') {
    throw new SpareCodeError(
      `this etcd records spare code ${code} as ${existing.record.state} (lent to region ${existing.record.lentTo}): ` +
        "adopt into the new region's own etcd, not the one that lent it",
    );
  }
  const held = await heldSlotsUnder(io, code);
  if (existing === undefined && held.length > 0) {
    throw new SpareCodeError(
      `slots under code ${code} are held in this etcd (workers ${held.map((h) => h.worker).join(', ')}): adopt before the first node starts`,
    );
  }
  const at = new Date((io.now ?? Date.now)()).toISOString();
  // The adoption is decided in the registry: reclaimed (with this handover) → adopted by this etcd, compared.
  const adopter = { clusterId: binding.clusterId, prefix: io.prefix };
  let reg = await readRegistryCode(io.registry, code, io.layout.maxRegion);
  if (reg === undefined)
    throw new SpareCodeError(
      `spare code ${code} is free in the spare-code registry (never lent, so never reclaimed): nothing to adopt from this handover`,
    );
  const fromFile = handoverSummary(handover.lentTo, handover.reclaimedAt, handover.workers);
  if (reg.record.state !== 'reclaimed' && reg.record.state !== 'adopted')
    throw registrySays(reg, 'only a reclaimed code may be adopted: finish "idgen spare reclaim" first');
  const why = reg.record.handover === undefined ? 'none recorded' : summaryDifference(reg.record.handover, fromFile);
  if (why !== undefined) throw registrySays(reg, `the handover file is not the one the registry recorded (${why})`);
  await checkOneRegistry(io, reg);
  const guard = await guardRegistryStep(io, { kind: 'adopt', code, lentTo: handover.lentTo, adopter: code });
  if (reg.record.state === 'reclaimed') await waitOutLoanTerm(io, reg, handover, loanTermOf(guard.now.record));
  if (reg.record.state === 'adopted') {
    const by = reg.record.adoptedBy;
    if (by?.clusterId !== adopter.clusterId || by.prefix !== adopter.prefix)
      throw registrySays(reg, 'a code is adopted once');
  } else {
    const cas = await casRegistryCode(
      io.registry,
      reg,
      { ...reg.record, state: 'adopted', adoptedBy: adopter, at },
      io.layout.maxRegion,
    );
    if (!cas.won || cas.entry === undefined) {
      if (cas.entry !== undefined) throw registrySays(cas.entry, 'changed meanwhile; a code is adopted once');
      throw new SpareCodeError(`${reg.key} vanished meanwhile; look at the registry`);
    }
    reg = cas.entry;
  }
  let written = 0;
  for (const w of handover.workers) {
    if (w.worker > io.layout.maxWorker)
      throw new SpareCodeError(`handover worker ${w.worker} is outside 0-${io.layout.maxWorker}`);
    const workerKey = leaseKeys.worker(io.prefix, code, w.worker);
    const lastKey = leaseKeys.lastMs(io.prefix, code, w.worker);
    const current = await getKey(io, lastKey);
    const currentFloor =
      current === undefined
        ? -1
        : computeFloor(parseLastMsRecord(lastKey, current.value), {
            ttlMs: handover.ttlMs,
            clockBoundMs: handover.clockBoundMs,
            epochMs: io.layout.epochMs,
          });
    if (currentFloor >= w.lastMs) continue; // never lower a floor already there (an adopt run twice, or later use)
    const record: LastMsRecord = { ms: w.lastMs, released: true, nodeId: HANDOVER_NODE_ID, at, ttlMs: handover.ttlMs };
    const res = await withTimeout(
      io.client
        .if(workerKey, 'Create', '==', 0)
        .and(lastKey, 'Mod', '==', current?.modRevision ?? '0')
        .then(io.client.put(lastKey).value(JSON.stringify(record)))
        .options(deadlineIn(io.timeoutMs))
        .commit(),
      io.timeoutMs,
      `writing ${lastKey}`,
    );
    if (!res.succeeded)
      throw new SpareCodeError(
        `${lastKey} or its worker key changed meanwhile (a node started on code ${code}?); run adopt again`,
      );
    written++;
  }
  const maxLastMs = handover.workers.reduce((m, w) => Math.max(m, w.lastMs), -1);
  const record: SpareCodeRecord = {
    code,
    state: 'adopted',
    at,
    registryRevision: reg.modRevision,
    registry: reg.registry,
    adoptedFrom: {
      lentTo: handover.lentTo,
      reclaimedAt: handover.reclaimedAt,
      workers: handover.workers.length,
      maxLastMs,
    },
  };
  if (existing !== undefined) {
    await guard.noteSeen(io.now);
    return { record: existing.record, written, changed: written > 0 };
  }
  const key = spareKeys.code(io.prefix, code);
  const res = await withTimeout(
    io.client
      .if(key, 'Create', '==', 0)
      .then(io.client.put(key).value(JSON.stringify(record)))
      .options(deadlineIn(io.timeoutMs))
      .commit(),
    io.timeoutMs,
    `adopt transaction on ${key}`,
  );
  if (!res.succeeded) throw new SpareCodeError(`${key} was written by someone else meanwhile; look again`);
  await guard.noteSeen(io.now);
  return { record, written, changed: true };
}

/**
 * Seals a dead loan (docs/design.md §7, "Registry threats"): a `lent` mirror the registry shows reclaimed, adopted or
 * lent elsewhere (the etcd was restored to before the reclaim) becomes `reclaimed`, compared on its mod revision, so no
 * claim under it can commit (each compares the mirror's mod revision) and no node boots on the code here.
 */
export async function sealDeadLoan(
  io: Io,
  entry: SpareCodeEntry,
  registryRevision: string,
  nowMs: number,
  registry: RegistryIdentity | undefined = entry.record.registry,
): Promise<void> {
  const r = entry.record;
  if (r.state === 'adopted' || r.state === 'reclaimed') return;
  const sealed: SpareCodeRecord = {
    code: r.code,
    state: 'reclaimed',
    lentTo: r.lentTo,
    at: new Date(nowMs).toISOString(),
    registryRevision,
    ...(registry === undefined ? {} : { registry: { clusterId: registry.clusterId, prefix: registry.prefix } }),
  };
  const res = await withTimeout(
    io.client
      .if(entry.key, 'Mod', '==', entry.modRevision)
      .then(io.client.put(entry.key).value(JSON.stringify(sealed)))
      .options(deadlineIn(io.timeoutMs))
      .commit(),
    io.timeoutMs,
    `sealing ${entry.key}`,
  );
  if (!res.succeeded) throw new SpareCodeError(`${entry.key} changed meanwhile; run the step again`);
}

/** A registry record's loan term, carried from `lent` through `reclaiming` and `reclaimed` (docs/design.md §7). */
function termOf(r: SpareRegistryRecord): { untilMs?: number } {
  return r.untilMs === undefined ? {} : { untilMs: r.untilMs };
}

/**
 * Adopt waits until the reclaimed loan's term has passed, plus the TTL ceiling and the clock bound (docs/design.md §7,
 * "Loan terms"): a borrower's etcd and the registry restored together to a state where the loan stood bring back at
 * most that term, and its holders give their slots back a TTL before it ends. A term written before terms existed
 * (none recorded) waits for nothing: such a loan was never renewed since this release.
 */
async function waitOutLoanTerm(
  io: Io & { layout: Layout; now?: () => number; onTermWait?: (ms: number, until: string) => void },
  reg: SpareRegistryEntry,
  handover: Handover,
  termMs: number,
): Promise<void> {
  const until = reg.record.untilMs;
  if (until === undefined) return;
  const ceiling = await readTtlCeiling(io);
  const holdMs = Math.max(handover.ttlMs, (ceiling?.ttlCeilingSeconds ?? 0) * 1000) + handover.clockBoundMs;
  const waitMs = until + holdMs - (io.now ?? Date.now)();
  if (waitMs <= 0) return;
  if (waitMs > termMs + holdMs + 60_000)
    throw registrySays(
      reg,
      `its loan's term ends at ${new Date(until).toISOString()}, more than a term from now (a clock behind?): adopt refused`,
    );
  io.onTermWait?.(waitMs, new Date(until + holdMs).toISOString());
  await sleep(waitMs);
}

/** Used by the lease: a `lent` record whose borrower is `region`, with the mod revision every claim compares. */
export function lentTo(entries: readonly SpareCodeEntry[], region: number): SpareCodeEntry[] {
  return entries.filter((e) => e.record.state === 'lent' && e.record.lentTo === region);
}
