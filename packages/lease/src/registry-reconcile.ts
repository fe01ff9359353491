import type { Layout } from '@idgen/core';
import { LEASE_DEFAULTS } from './config.js';
import { deadlineIn, withTimeout } from './etcd-client.js';
import { readRegionView } from './registry-guard.js';
import {
  RegistryRefusedError,
  loanTermOf,
  noteRegistrySeen,
  parseRegistryDeployment,
  readRegistryNow,
  registryMetaKeys,
} from './registry-identity.js';
import type { DeploymentRegistry, RegionEtcd, RegionRegistryView } from './registry-identity.js';
import { sealDeadLoan, spareKeys } from './spare-codes.js';
import type { SpareCodeEntry, SpareCodeRecord } from './spare-codes.js';
import { casRegistryCode, listRegistryCodes, newLoanTimes } from './spare-registry.js';
import type { RegistryIo, RegistryState, SpareRegistryEntry, SpareRegistryRecord } from './spare-registry.js';
import { regionBindingKey, parseRegionBinding } from './region-binding.js';

/**
 * `idgen spare reconcile` (docs/runbook.md "Restoring the registry"): after the registry's history went back (restored
 * from a backup, or rebuilt on a new etcd), rebuild it from the regions' mirrors, the copies each step left in the
 * region it wrote. For each code the most advanced mirror wins (lent < reclaiming < reclaimed < adopted); the registry
 * is only ever moved forward; a mirror the winner makes dead (a loan whose code was adopted since) is sealed
 * `reclaimed`; every mirror then follows the registry's new record; and every region's memory of the registry is set
 * to the registry's revision now. Two loans of one code to different regions are refused: that is a double loan
 * already, for `idgen audit` and an operator, not for a tool to pick.
 */

const ORDER: readonly RegistryState[] = ['lent', 'reclaiming', 'reclaimed', 'adopted'];

/** What reconcile did to one code. */
export interface ReconciledCode {
  readonly code: number;
  /** The registry's state before and after (`free`: no record). */
  readonly before: RegistryState | 'free';
  readonly after: RegistryState | 'free';
  /** Which region's mirror decided it. */
  readonly from: string;
  /** Mirrors sealed as dead loans. */
  readonly sealed: readonly string[];
}

/** What {@link reconcileRegistry} did. */
export interface ReconcileReport {
  readonly registry: DeploymentRegistry;
  readonly revision: string;
  readonly codes: readonly ReconciledCode[];
  readonly regions: number;
}

interface Winner {
  readonly view: RegionRegistryView;
  readonly entry: SpareCodeEntry;
  readonly region: RegionEtcd;
}

function rank(s: RegistryState): number {
  return ORDER.indexOf(s);
}

function lineOf(r: SpareCodeRecord): number {
  return r.state === 'adopted' ? r.adoptedFrom.lentTo : r.lentTo;
}

/** The registry record a winning mirror stands for; `reclaimed` comes back as `reclaiming` (reclaim recomputes it). */
async function recordFor(w: Winner, layout: Layout, at: string): Promise<Omit<SpareRegistryRecord, 'trail'>> {
  const r = w.entry.record;
  if (r.state !== 'adopted')
    // A handover's per-worker floors are not in a mirror: the code goes back to reclaiming, and the same
    // "idgen spare reclaim" then finishes it from the borrower's records (docs/runbook.md "Restoring the registry").
    return { code: r.code, state: r.state === 'lent' ? 'lent' : 'reclaiming', lentTo: r.lentTo, at };
  const key = regionBindingKey(w.region.prefix);
  const got = await withTimeout(
    w.region.client.get(key).options(deadlineIn(w.region.timeoutMs)).exec(),
    w.region.timeoutMs,
    `reading ${key} in ${w.region.name}`,
  );
  const raw = got.kvs[0]?.value.toString('utf8');
  if (raw === undefined)
    throw new RegistryRefusedError('conflict', `${w.region.name} adopted code ${r.code} but has no region binding`);
  const binding = parseRegionBinding(key, raw, layout.maxRegion);
  return {
    code: r.code,
    state: 'adopted',
    lentTo: r.adoptedFrom.lentTo,
    handover: {
      lentTo: r.adoptedFrom.lentTo,
      reclaimedAt: r.adoptedFrom.reclaimedAt,
      workers: [],
      maxLastMs: r.adoptedFrom.maxLastMs,
    },
    adoptedBy: { clusterId: binding.clusterId, prefix: w.region.prefix },
    at,
  };
}

/** Rebuilds the registry from every region's mirrors (see the file's comment); refuses with one line. */
export async function reconcileRegistry(io: {
  readonly registry: RegistryIo;
  readonly regions: readonly RegionEtcd[];
  readonly layout: Layout;
  readonly now?: () => number;
}): Promise<ReconcileReport> {
  const nowMs = (io.now ?? Date.now)();
  const at = new Date(nowMs).toISOString();
  if (io.regions.length === 0) throw new RegistryRefusedError('conflict', 'the deployment file lists no region');
  const views: RegionRegistryView[] = [];
  for (const r of io.regions) views.push(await readRegionView(r, io.layout));
  const ids = new Set(views.flatMap((v) => (v.seen === undefined ? [] : [v.seen.registry.deploymentId])));
  if (ids.size > 1)
    throw new RegistryRefusedError(
      'other-registry',
      `the regions follow ${ids.size} deployment IDs (${[...ids].join(', ')}): they are not one deployment's; fix the deployment file`,
    );
  const remembered = [...ids][0];
  // The registry's deployment record: restored to before init, or a new etcd: the ID the regions remember comes back.
  let registryNow;
  try {
    registryNow = await readRegistryNow(io.registry);
  } catch (e) {
    if (!(e instanceof RegistryRefusedError) || e.refusal !== 'uninitialised' || remembered === undefined) throw e;
    const key = registryMetaKeys.deployment(io.registry.prefix);
    await withTimeout(
      io.registry.client
        .if(key, 'Create', '==', 0)
        .then(io.registry.client.put(key).value(JSON.stringify({ deploymentId: remembered, at, reconciledAt: at })))
        .options(deadlineIn(io.registry.timeoutMs))
        .commit(),
      io.registry.timeoutMs,
      `writing ${key}`,
    );
    registryNow = await readRegistryNow(io.registry);
  }
  if (remembered !== undefined && registryNow.identity.deploymentId !== remembered)
    throw new RegistryRefusedError(
      'other-registry',
      `the regions follow deployment ${remembered}, this registry is deployment ${registryNow.identity.deploymentId}: ` +
        "it is not this deployment's registry; give the one the regions follow",
    );

  // The most advanced mirror of each code, over every region; two loans to different regions are refused.
  const winners = new Map<number, Winner>();
  io.regions.forEach((region, i) => {
    const view = views[i] as RegionRegistryView;
    for (const entry of view.mirrors) {
      const code = entry.record.code;
      const w = winners.get(code);
      if (w !== undefined && lineOf(w.entry.record) !== lineOf(entry.record))
        throw new RegistryRefusedError(
          'conflict',
          `spare code ${code} was lent to region ${lineOf(w.entry.record)} (${w.view.name}) and to region ` +
            `${lineOf(entry.record)} (${view.name}): a double loan; run idgen audit and settle it by hand before reconcile`,
        );
      if (w === undefined || rank(entry.record.state) > rank(w.entry.record.state))
        winners.set(code, { view, entry, region });
    }
  });

  const registered = new Map<number, SpareRegistryEntry>(
    (await listRegistryCodes(io.registry, io.layout.maxRegion)).map((e) => [e.record.code, e]),
  );
  const out: ReconciledCode[] = [];
  for (const [code, w] of [...winners].sort((a, b) => a[0] - b[0])) {
    const before = registered.get(code);
    const want = await recordFor(w, io.layout, at);
    // The registry's record is of another loan than every mirror of the code: a lend the regions never mirrored.
    if (before !== undefined && before.record.lentTo !== want.lentTo)
      throw new RegistryRefusedError(
        'conflict',
        `the registry says code ${code} is lent (or was) to region ${before.record.lentTo}, the mirrors to region ` +
          `${want.lentTo} (${w.view.name}): run idgen audit and settle it by hand before reconcile`,
      );
    let entry = before;
    // A loan not yet adopted gets a whole term from now (docs/design.md §7, "Loan terms"): a renewal the rewound
    // registry lost may have carried it that far, so adopt waits at least as long as it would have.
    const termMs = loanTermOf(registryNow.record);
    const untilMs = nowMs + termMs;
    // A `lent` record the registry lost is written anew: its first claims wait as a lend's do (newLoanTimes), since
    // the deployment file may leave out a region that still holds an older loan of the code the registry forgot.
    const recreated =
      before === undefined && want.state === 'lent'
        ? newLoanTimes(nowMs, termMs, LEASE_DEFAULTS.clockBoundMs)
        : { untilMs };
    const next: Omit<SpareRegistryRecord, 'trail'> | undefined =
      before === undefined || rank(want.state) > rank(before.record.state)
        ? { ...want, ...(want.state === 'adopted' ? {} : recreated) }
        : before.record.state !== 'adopted' && (before.record.untilMs ?? 0) < untilMs
          ? { ...withoutTrail(before.record), untilMs }
          : undefined;
    if (next !== undefined) {
      const cas = await casRegistryCode(io.registry, before, next, io.layout.maxRegion);
      if (!cas.won || cas.entry === undefined)
        throw new RegistryRefusedError(
          'conflict',
          `the registry's record of code ${code} changed meanwhile; run reconcile again`,
        );
      entry = cas.entry;
    }
    const now = entry as SpareRegistryEntry;
    const sealed: string[] = [];
    // Every mirror of the code now follows the registry's record; a loan it outran is sealed.
    for (let i = 0; i < io.regions.length; i++) {
      const view = views[i] as RegionRegistryView;
      const region = io.regions[i] as RegionEtcd;
      const m = view.mirrors.find((e) => e.record.code === code);
      if (m === undefined) continue;
      const dead =
        (m.record.state === 'lent' || m.record.state === 'reclaiming') &&
        (now.record.state === 'reclaimed' || now.record.state === 'adopted');
      if (dead) {
        await sealDeadLoan(region, m, now.modRevision, nowMs, registryNow.identity);
        sealed.push(`${view.name}: ${m.key}`);
        continue;
      }
      await repointMirror(region, m, now, registryNow.identity);
    }
    out.push({ code, before: before?.record.state ?? 'free', after: now.record.state, from: w.view.name, sealed });
  }
  // The deployment record says when, and every region remembers the registry as it is now.
  await markReconciled(io.registry, at);
  const final = await readRegistryNow(io.registry);
  for (const r of io.regions) await noteRegistrySeen(r, final.identity, final.revision, { now: io.now, force: true });
  return { registry: final.identity, revision: final.revision, codes: out, regions: io.regions.length };
}

function withoutTrail(r: SpareRegistryRecord): Omit<SpareRegistryRecord, 'trail'> {
  const { trail: _trail, ...rest } = r;
  return rest;
}

/** A mirror made to follow the registry's record as it is now (compared on the mirror's mod revision). */
async function repointMirror(
  region: RegionEtcd,
  m: SpareCodeEntry,
  reg: SpareRegistryEntry,
  identity: DeploymentRegistry,
): Promise<void> {
  const next = {
    ...m.record,
    registryRevision: reg.modRevision,
    registry: { clusterId: identity.clusterId, prefix: identity.prefix },
  };
  const key = spareKeys.code(region.prefix, m.record.code);
  const res = await withTimeout(
    region.client
      .if(key, 'Mod', '==', m.modRevision)
      .then(region.client.put(key).value(JSON.stringify(next)))
      .options(deadlineIn(region.timeoutMs))
      .commit(),
    region.timeoutMs,
    `repointing ${key} in ${region.name}`,
  );
  if (!res.succeeded)
    throw new RegistryRefusedError('conflict', `${key} in ${region.name} changed meanwhile; run reconcile again`);
}

async function markReconciled(registry: RegistryIo, at: string): Promise<void> {
  const key = registryMetaKeys.deployment(registry.prefix);
  const got = await withTimeout(
    registry.client.get(key).options(deadlineIn(registry.timeoutMs)).exec(),
    registry.timeoutMs,
    `reading ${key}`,
  );
  const kv = got.kvs[0];
  if (kv === undefined) return;
  const record = { ...parseRegistryDeployment(key, kv.value.toString('utf8')), reconciledAt: at };
  await withTimeout(
    registry.client
      .if(key, 'Mod', '==', kv.mod_revision)
      .then(registry.client.put(key).value(JSON.stringify(record)))
      .options(deadlineIn(registry.timeoutMs))
      .commit(),
    registry.timeoutMs,
    `writing ${key}`,
  );
}
