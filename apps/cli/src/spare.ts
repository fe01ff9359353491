import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createLayout, DEFAULT_LAYOUT, type Layout } from '@idgen/core';
import { isLeaseError } from '@idgen/lease';
import {
  SpareRegistryCallError,
  adoptSpareCode,
  isRegistryRefusedError,
  beginReclaim,
  describeRegistry,
  exportHandover,
  heldSlotsUnder,
  lendSpareCode,
  listRegistryCodes,
  listSpareCodes,
  spareCodesOf,
  type Handover,
  type RegionEtcd,
  type RegistryIo,
  type SpareCodeEntry,
} from '@idgen/lease/operator';
import {
  leaseKeys,
  parseHandover,
  parseLayoutRecord,
  parseSpareCodeRecord,
  type SpareCodeRecord,
  type SpareRegistryRecord,
} from '@idgen/lease/records';
import type { Etcd3 } from 'etcd3';
import {
  EtcdAuthenticationFailedError,
  EtcdPermissionDeniedError,
  EtcdRoleNotGrantedError,
  EtcdUserNotFoundError,
} from 'etcd3';
import type { VerbContext } from './context.js';
import { openEtcdClient, unreachableAfter } from './etcd-state.js';
import { readDeploymentFile } from './audit.js';
import {
  CliError,
  EXIT_OK,
  EXIT_PROBLEM,
  EXIT_REGISTRY,
  EXIT_UNREACHABLE,
  isCliError,
  usageError,
  type ExitCode,
} from './exit-codes.js';
import {
  deadlines,
  etcdConnection,
  integerOption,
  registryConnection,
  type EtcdConnection,
  type EtcdFlags,
  type RegistryFlags,
} from './options.js';
import { isoTime, renderTable } from './table.js';

/**
 * Reads the spare-code records of an etcd (for `decode --etcd` and `leases`): by code. Read-only; garbage records are
 * left out and named in `problems`.
 */
export async function readSpareNotes(
  flags: EtcdFlags & { timeoutMs: string },
): Promise<{ notes: Map<number, SpareCodeRecord>; problems: string[] }> {
  const d = deadlines(flags);
  const { timeoutMs } = d;
  const connection = etcdConnection(flags);
  const { options } = connection;
  const client = await openEtcdClient(connection, d, { retryReads: true });
  const where = `etcd ${options.endpoints.join(',')}`;
  try {
    const layoutKey = leaseKeys.layout(connection.keyPrefix);
    const raw = await unreachableAfter(client.get(layoutKey).string(), timeoutMs, where);
    let layout = DEFAULT_LAYOUT;
    if (raw !== null) {
      try {
        layout = createLayout(parseLayoutRecord(layoutKey, raw));
      } catch {
        // leases says so on its own; decode goes on with the default
      }
    }
    const notes = new Map<number, SpareCodeRecord>();
    const problems: string[] = [];
    const prefix = `${connection.keyPrefix}/spare-codes/`;
    const kvs = await unreachableAfter(client.getAll().prefix(prefix).strings(), timeoutMs, where);
    for (const [key, value] of Object.entries(kvs)) {
      try {
        const entry = parseSpareCodeRecord(key, value, layout.maxRegion);
        notes.set(entry.code, entry);
      } catch (e) {
        problems.push((e as Error).message);
      }
    }
    return { notes, problems };
  } finally {
    client.close();
  }
}

/** Flags every `idgen spare` verb takes (the registry's: lend, reclaim and adopt need it, list may show it). */
export interface SpareFlags extends EtcdFlags, Partial<RegistryFlags> {
  timeoutMs: string;
  json: boolean;
  /** The deployment file (idgen audit's): every region's etcd, checked before lend, reclaim and adopt write. */
  config?: string;
}

export interface LendFlags extends SpareFlags {
  toRegion?: string;
}

export interface ReclaimFlags extends SpareFlags {
  handover?: string;
  waitMs: string;
  leaseTtl: string;
  clockBoundMs: string;
}

export interface AdoptFlags extends SpareFlags {
  handover?: string;
}

/** What a verb's function gets: the region's etcd, its layout, and the registry when the verb takes one. */
export interface SpareIo {
  client: Etcd3;
  prefix: string;
  timeoutMs: number;
  layout: Layout;
  /** The other regions of `--config` (docs/design.md §7, "Registry threats"): read before a step writes. */
  deployment?: RegionEtcd[];
}

/** A connected writer on one etcd; `run` maps etcd's refusals and timeouts to the CLI's exit codes. */
export async function withEtcd<T>(flags: SpareFlags, verb: string, fn: (io: SpareIo) => Promise<T>): Promise<T> {
  return withConnections(flags, verb, undefined, (io) => fn(io));
}

/**
 * The region's etcd and the spare-code registry (`--registry`, required: the verb is decided there first,
 * docs/design.md §7). The registry's failures are named after it: no answer within --timeout-ms is exit 3, and the
 * region's etcd is not written after it.
 */
export async function withRegistry<T>(
  flags: SpareFlags,
  verb: string,
  fn: (io: SpareIo & { registry: RegistryIo }) => Promise<T>,
): Promise<T> {
  const registry = registryConnection({ registryPrefix: '/idgen', ...flags }, registryWhy(verb));
  return withConnections(flags, verb, registry, (io, reg) => fn({ ...io, registry: reg as RegistryIo }));
}

function registryWhy(verb: string): string {
  return `idgen spare ${verb} is decided in the deployment's spare-code registry first (docs/design.md §7)`;
}

/** A usage error (exit 2) before anything else when a writing verb has no --registry or no --config. */
function requireRegistry(flags: SpareFlags, verb: string): void {
  if (flags.registry === undefined) throw usageError(`--registry is required: ${registryWhy(verb)}`);
  if (flags.config === undefined)
    throw usageError(
      `--config <deployment.json> is required: every region's etcd is checked for the registry it follows and for ` +
        `a mirror that contradicts this ${verb} before anything is written (docs/design.md §7)`,
    );
}

/**
 * Opens every region of the deployment file (each with the CLI's deadlines); `fn` gets them, and they are closed
 * after. A region that does not answer fails the step (exit 3) before anything is written.
 */
export async function withDeploymentRegions<T>(
  config: string | undefined,
  flags: SpareFlags,
  fn: (regions: RegionEtcd[]) => Promise<T>,
): Promise<T> {
  if (config === undefined) return fn([]);
  const d = deadlines(flags);
  const opened: { client: Etcd3; name: string; prefix: string }[] = [];
  try {
    for (const r of readDeploymentFile(config)) {
      const client = await openEtcdClient(r.connection, d);
      opened.push({
        client,
        name: `region ${r.name} (${r.connection.options.endpoints.join(',')})`,
        prefix: r.connection.keyPrefix,
      });
    }
    return await fn(opened.map((o) => ({ client: o.client, prefix: o.prefix, timeoutMs: d.timeoutMs, name: o.name })));
  } finally {
    for (const o of opened) o.client.close();
  }
}

async function withConnections<T>(
  flags: SpareFlags,
  verb: string,
  registryAt: EtcdConnection | undefined,
  fn: (io: SpareIo, registry: RegistryIo | undefined) => Promise<T>,
): Promise<T> {
  const d = deadlines(flags);
  const { timeoutMs } = d;
  const connection: EtcdConnection = etcdConnection(flags);
  const { options } = connection;
  // Writes are never retried by the library (docs/design.md §5); every step here is a compare-and-put or a read.
  const client = await openEtcdClient(connection, d);
  const where = `etcd ${options.endpoints.join(',')}`;
  const registryWhere = `the spare-code registry ${registryAt?.options.endpoints.join(',') ?? ''}`;
  let registryClient: Etcd3 | undefined;
  try {
    registryClient = registryAt === undefined ? undefined : await openEtcdClient(registryAt, d);
  } catch (e) {
    client.close();
    throw isCliError(e) ? new CliError(e.exitCode, `the spare-code registry ${e.message.replace(/^etcd /, '')}`) : e;
  }
  try {
    const layoutKey = leaseKeys.layout(connection.keyPrefix);
    const raw = await unreachableAfter(client.get(layoutKey).string(), timeoutMs, where);
    const layout = raw === null ? DEFAULT_LAYOUT : createLayout(parseLayoutRecord(layoutKey, raw));
    const registry: RegistryIo | undefined =
      registryAt === undefined || registryClient === undefined
        ? undefined
        : {
            client: registryClient,
            prefix: registryAt.keyPrefix,
            timeoutMs,
            name: registryAt.options.endpoints.join(','),
          };
    return await withDeploymentRegions(flags.config, flags, (deployment) =>
      fn({ client, prefix: connection.keyPrefix, timeoutMs, layout, deployment }, registry),
    );
  } catch (e) {
    if (e instanceof SpareRegistryCallError) throw asCliError(e.cause, verb, registryWhere, true);
    throw asCliError(e, verb, where);
  } finally {
    client.close();
    registryClient?.close();
  }
}

function asCliError(e: unknown, verb: string, where: string, registry = false): unknown {
  if (e instanceof CliError) return e;
  if (isRegistryRefusedError(e)) return new CliError(EXIT_REGISTRY, e.message);
  if (isLeaseError(e)) return new CliError(EXIT_PROBLEM, e.message);
  if (registry && (e instanceof EtcdPermissionDeniedError || e instanceof EtcdRoleNotGrantedError))
    return new CliError(
      EXIT_PROBLEM,
      `${where}: etcd denied it (${e.message}): idgen spare ${verb} writes {registry-prefix}/spare-registry/ there; ` +
        'use a user whose role may write it (docs/runbook.md "Lending a spare region code")',
    );
  if (registry && (e instanceof EtcdAuthenticationFailedError || e instanceof EtcdUserNotFoundError))
    return new CliError(
      EXIT_PROBLEM,
      `${where}: etcd refused the credentials (--registry-user / --registry-password-file): ${e.message}`,
    );
  if (e instanceof EtcdPermissionDeniedError || e instanceof EtcdRoleNotGrantedError) {
    return new CliError(
      EXIT_PROBLEM,
      verb.startsWith('region ')
        ? `etcd denied it (${e.message}): idgen ${verb} writes {prefix}/region${verb === 'region restored' ? ' and every last-ms' : ''}; use a user whose role may write the prefix (root, or idgen-node)`
        : `etcd denied it (${e.message}): idgen spare ${verb} writes {prefix}/spare-codes/ (and adopt {prefix}/regions/{code}/last-ms/); ` +
            'use a user whose role may write them (docs/runbook.md "Lending a spare region code")',
    );
  }
  if (e instanceof EtcdAuthenticationFailedError || e instanceof EtcdUserNotFoundError) {
    return new CliError(
      EXIT_PROBLEM,
      `etcd refused the credentials (--etcd-user / --etcd-password-file): ${e.message}`,
    );
  }
  const message = (e as Error).message?.split(/ Resolution note|\n/)[0]?.trim() ?? String(e);
  return new CliError(EXIT_UNREACHABLE, `${where}: ${message}`);
}

function codeArg(text: string, layout: Layout = DEFAULT_LAYOUT): number {
  return integerOption('<code>', text, 0, layout.maxRegion);
}

function describeRecord(r: SpareCodeRecord): string {
  if (r.state === 'adopted')
    return `adopted (lent to region ${r.adoptedFrom.lentTo} before, reclaimed ${r.adoptedFrom.reclaimedAt || '?'})`;
  return `${r.state}, lent to region ${r.lentTo}`;
}

/** `idgen spare lend <code> --to-region R --etcd <region R's etcd>`. */
export async function runSpareLend(code: string, flags: LendFlags, ctx: VerbContext): Promise<ExitCode> {
  requireRegistry(flags, 'lend');
  if (flags.toRegion === undefined) throw usageError('--to-region is required');
  const c = codeArg(code);
  const to = integerOption('--to-region', flags.toRegion, 0, DEFAULT_LAYOUT.maxRegion);
  const { record, changed, usableFromMs } = await withRegistry(flags, 'lend', (io) =>
    lendSpareCode({ ...io, now: ctx.nowMs }, c, to),
  );
  const usableFrom = usableFromMs === undefined ? undefined : new Date(usableFromMs).toISOString();
  if (flags.json) ctx.io.out(JSON.stringify({ record, changed, usableFrom }));
  else {
    ctx.io.out(`spare code ${c}: ${describeRecord(record)}${changed ? '' : ' (already so: nothing written)'}`);
    if (usableFromMs !== undefined && usableFromMs > ctx.nowMs())
      ctx.io.out(
        `borrowers may first claim under it from ${usableFrom} (a loan term and a quarter after the lend: ` +
          'docs/runbook.md, "Lending a spare region code")',
      );
  }
  return EXIT_OK;
}

/**
 * `idgen spare reclaim <code> --handover FILE --etcd <the borrowing region's etcd>`: `reclaiming`, then waits (up to
 * --wait-ms) until every slot under the code is released or expired, then writes the handover file and marks the
 * code `reclaimed`. Run again after a timeout: it carries on where it stopped.
 */
export async function runSpareReclaim(code: string, flags: ReclaimFlags, ctx: VerbContext): Promise<ExitCode> {
  requireRegistry(flags, 'reclaim');
  if (flags.handover === undefined) throw usageError('--handover FILE is required (where the handover is written)');
  const c = codeArg(code);
  const waitMs = integerOption('--wait-ms', flags.waitMs, 0, 3_600_000);
  const ttlMs = integerOption('--lease-ttl', flags.leaseTtl, 2, 3600) * 1000;
  const clockBoundMs = integerOption('--clock-bound-ms', flags.clockBoundMs, 0, 60_000);
  const file = flags.handover;
  const outcome = await withRegistry(flags, 'reclaim', async (io) => {
    const record = await beginReclaim({ ...io, now: ctx.nowMs }, c);
    if (!flags.json)
      ctx.io.err(
        `idgen spare reclaim: code ${c} is ${record.state} (lent to region ${record.lentTo}): no new claims under it`,
      );
    const end = Date.now() + waitMs;
    let held = await heldSlotsUnder(io, c);
    while (held.length > 0 && Date.now() < end) {
      await new Promise((r) => setTimeout(r, Math.min(500, Math.max(1, end - Date.now()))));
      held = await heldSlotsUnder(io, c);
    }
    if (held.length > 0) return { held: held.map((h) => h.worker) };
    return { handover: await exportHandover({ ...io, ttlMs, clockBoundMs, now: ctx.nowMs }, c) };
  });
  if ('held' in outcome) {
    const workers = outcome.held ?? [];
    const line = `code ${c}: ${workers.length} slot(s) still held after ${waitMs} ms (workers ${workers.join(', ')}); no handover yet: run reclaim again`;
    if (flags.json) ctx.io.out(JSON.stringify({ code: c, state: 'reclaiming', held: workers }));
    ctx.io.err(`idgen spare reclaim: ${line}`);
    return EXIT_PROBLEM;
  }
  const handover = outcome.handover as Handover;
  const tmp = `${file}.tmp-${process.pid}`;
  try {
    writeFileSync(tmp, `${JSON.stringify(handover, null, 2)}\n`, { mode: 0o644 });
    renameSync(tmp, file);
  } catch (e) {
    throw new CliError(
      EXIT_PROBLEM,
      `writing ${file}: ${(e as Error).message} (the code is reclaimed: run reclaim again to write the file)`,
    );
  }
  if (flags.json)
    ctx.io.out(JSON.stringify({ code: c, state: 'reclaimed', handover: file, workers: handover.workers }));
  else {
    ctx.io.out(
      `spare code ${c}: reclaimed from region ${handover.lentTo}; handover written to ${file} (${handover.workers.length} worker(s))`,
    );
    const rows = handover.workers.map((w) => [
      String(w.worker),
      isoTime(w.lastMs),
      String(w.lastMs),
      w.source.released ? 'clean' : `unclean: last-ms + TTL + ${handover.clockBoundMs} ms`,
    ]);
    if (rows.length > 0)
      for (const l of renderTable(['WORKER', 'LAST-MS (NEW HOLDER MINTS ABOVE)', 'MS', 'FROM'], rows)) ctx.io.out(l);
  }
  return EXIT_OK;
}

/** `idgen spare adopt <code> --handover FILE --etcd <the new region's etcd>`. */
export async function runSpareAdopt(code: string, flags: AdoptFlags, ctx: VerbContext): Promise<ExitCode> {
  requireRegistry(flags, 'adopt');
  if (flags.handover === undefined) throw usageError('--handover FILE is required (written by idgen spare reclaim)');
  const c = codeArg(code);
  let text: string;
  try {
    text = readFileSync(flags.handover, 'utf8');
  } catch (e) {
    throw usageError(`--handover ${flags.handover}: ${(e as Error).message}`);
  }
  let handover: Handover;
  try {
    handover = parseHandover(text, flags.handover);
  } catch (e) {
    throw usageError((e as Error).message);
  }
  if (handover.code !== c) throw usageError(`${flags.handover} hands over code ${handover.code}, not ${c}`);
  const { record, written, changed } = await withRegistry(flags, 'adopt', (io) =>
    adoptSpareCode(
      {
        ...io,
        now: ctx.nowMs,
        onTermWait: (ms, until) =>
          ctx.io.err(
            `idgen spare adopt: waiting ${Math.ceil(ms / 1000)} s, until ${until}, for the reclaimed loan's term and a TTL ` +
              'to pass (docs/design.md §7, "Loan terms")',
          ),
      },
      handover,
    ),
  );
  if (flags.json) ctx.io.out(JSON.stringify({ record, written, changed }));
  else {
    ctx.io.out(
      `spare code ${c}: ${changed ? 'adopted' : 'already adopted'} here; ${written} last-ms record(s) written` +
        ` (highest ${isoTime(handover.workers.reduce((m, w) => Math.max(m, w.lastMs), 0))}); nodes may now start on region ${c}`,
    );
  }
  return EXIT_OK;
}

/**
 * `idgen spare list --etcd [--registry]`: the spare codes of the layout record, each one's record here and its held
 * slots, and with --registry the registry's record beside it (the deployment's view: who holds the code).
 */
export async function runSpareList(flags: SpareFlags, ctx: VerbContext): Promise<ExitCode> {
  const list = async (io: SpareIo, registry: RegistryIo | undefined) => {
    const layoutKey = leaseKeys.layout(io.prefix);
    const raw = await io.client.get(layoutKey).string();
    const spares = spareCodesOf(layoutKey, raw ?? undefined, io.layout.maxRegion);
    const entries: SpareCodeEntry[] = await listSpareCodes(io);
    const registered = registry === undefined ? undefined : await listRegistryCodes(registry, io.layout.maxRegion);
    const codes = [
      ...new Set([...spares, ...entries.map((e) => e.record.code), ...(registered ?? []).map((e) => e.record.code)]),
    ].sort((a, b) => a - b);
    const out = [];
    for (const code of codes) {
      const e = entries.find((x) => x.record.code === code);
      const r = registered?.find((x) => x.record.code === code);
      out.push({
        code,
        spare: spares.includes(code),
        record: e?.record ?? null,
        held: (await heldSlotsUnder(io, code)).map((h) => h.worker),
        ...(registered === undefined
          ? {}
          : { registry: r === undefined ? null : { ...r.record, modRevision: r.modRevision } }),
      });
    }
    return out;
  };
  const rows =
    flags.registry === undefined
      ? await withEtcd(flags, 'list', (io) => list(io, undefined))
      : await withRegistry(flags, 'list', (io) => list(io, io.registry));
  if (flags.json) ctx.io.out(JSON.stringify({ codes: rows }));
  else {
    const withRegistryColumn = flags.registry !== undefined;
    const table = rows.map((r) => [
      String(r.code),
      r.record?.state ?? (r.spare ? 'spare' : ''),
      r.record === undefined || r.record === null
        ? ''
        : r.record.state === 'adopted'
          ? `(was ${r.record.adoptedFrom.lentTo})`
          : String(r.record.lentTo),
      String(r.held.length),
      r.record?.at ?? '',
      ...(withRegistryColumn ? [registryCell((r as { registry?: SpareRegistryRecord | null }).registry)] : []),
    ]);
    const head = ['CODE', 'STATE', 'LENT-TO', 'HELD', 'SINCE', ...(withRegistryColumn ? ['REGISTRY'] : [])];
    for (const l of renderTable(head, table)) ctx.io.out(l);
  }
  return EXIT_OK;
}

function registryCell(r: SpareRegistryRecord | null | undefined): string {
  return r === null || r === undefined ? 'free' : describeRegistry(r);
}

/** What `decode --etcd` and `leases` say about a region code this etcd has a spare record for. */
export function spareNote(r: SpareCodeRecord): string {
  return r.state === 'adopted'
    ? `code ${r.code}, adopted here (lent to region ${r.adoptedFrom.lentTo} before)`
    : `code ${r.code}, lent to region ${r.lentTo}${r.state === 'lent' ? '' : ` (${r.state})`}`;
}
