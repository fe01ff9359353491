/**
 * Fault `wrong-region-node` (issue 21, item 9): an operator's mistake, an extra `idgen-server` started with another
 * region's code against the run's etcd, which is bound to the run's code (`{prefix}/region`, docs/design.md §5).
 * Before the binding such a node claimed a slot under `{prefix}/regions/{its code}/` in the wrong etcd and minted
 * that region's IDs beside the region's own nodes: duplicates. Expected now: it exits 2 during its start with the
 * binding line, never becomes ready, and no key exists under `{prefix}/regions/{its code}/`.
 */
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { freePort, serverLaunchArgs, spawnProcess } from '@idgen/testing';
import { ETCD_PREFIX, type FaultHandler } from '../fault-context.js';

/** Exit code of a node refused by the region binding (apps/server/src/main.ts, EXIT_REGION_REFUSED). */
export const EXIT_REGION_REFUSED = 2;

/** The binding's refusal as the server logs it (packages/lease/src/region-binding.ts). */
export const BINDING_LINE = /this etcd serves region \d+ \(.*\), not region \d+/;

/** A region code other than `region` (the run's), for the wrong node. */
export function wrongRegionOf(region: number): number {
  return region === 2 ? 3 : 2;
}

/** Options of {@link runWrongRegionNode}. */
export interface WrongRegionOptions {
  readonly serverMain: string;
  /** The run's etcd members (straight, not through a node's link). */
  readonly etcd: readonly string[];
  /** The code the node is (wrongly) given. */
  readonly wrongRegion: number;
  readonly prefix: string;
  readonly slots: number;
  readonly leaseTtlSeconds: number;
  /** Where its log goes (`node-wrong-region-N.log`). */
  readonly dir: string;
  readonly name: string;
  /** How long it may take to exit before it is stopped and the expectation missed. */
  readonly timeoutMs: number;
}

/** What the wrong-region node did. */
export interface WrongRegionOutcome {
  readonly exitCode: number | null | undefined;
  readonly bindingLine: string | undefined;
  readonly becameReady: boolean;
  /** Keys under `{prefix}/regions/{wrong}/` after it ended (undefined: etcd did not answer). */
  readonly keys: number | undefined;
  readonly tookMs: number;
}

/** Keys under `prefix` (etcd's gRPC-JSON gateway, `count_only`), asked of each member until one answers. */
export async function countKeys(endpoints: readonly string[], prefix: string): Promise<number | undefined> {
  const b64 = (s: string | Buffer): string => Buffer.from(s).toString('base64');
  const end = Buffer.from(prefix);
  end[end.length - 1] = (end[end.length - 1] as number) + 1;
  for (const e of endpoints) {
    try {
      const res = await fetch(`${e}/v3/kv/range`, {
        method: 'POST',
        body: JSON.stringify({ key: b64(prefix), range_end: b64(end), count_only: true }),
        headers: { 'content-type': 'application/json' },
        signal: AbortSignal.timeout(2000),
      });
      const body = (await res.json()) as { count?: string; header?: unknown };
      if (body.header !== undefined) return Number(body.count ?? '0');
    } catch {
      // next member
    }
  }
  return undefined;
}

/** Starts the node and watches it end (stopped after `timeoutMs` if it does not). */
export async function runWrongRegionNode(o: WrongRegionOptions): Promise<WrongRegionOutcome> {
  const t0 = Date.now();
  const listen = `127.0.0.1:${await freePort()}`;
  const handle = spawnProcess(process.execPath, [
    ...serverLaunchArgs(o.serverMain),
    '--region',
    String(o.wrongRegion),
    '--etcd',
    o.etcd.join(','),
    '--listen',
    listen,
    '--workers',
    `0-${o.slots - 1}`,
    '--lease-ttl',
    String(o.leaseTtlSeconds),
    '--time-source',
    'none',
    '--node-id',
    `chaos-${o.name}`,
  ]);
  let timer: NodeJS.Timeout | undefined;
  const exited = await Promise.race([
    handle.exited,
    new Promise<undefined>((r) => {
      timer = setTimeout(() => r(undefined), o.timeoutMs);
    }),
  ]);
  clearTimeout(timer);
  const tookMs = Date.now() - t0;
  const exit = exited ?? (await handle.stop(5000));
  const log = createWriteStream(join(o.dir, `node-${o.name}.log`));
  for (const l of handle.lines) log.write(`${l}\n`);
  log.end(
    `[chaos] ${exited === undefined ? 'stopped after the time limit, ' : ''}exited code ${exit.code} signal ${exit.signal}\n`,
  );
  const msgs = handle.stdoutLines.map((l) => {
    try {
      return String((JSON.parse(l) as { msg?: unknown }).msg ?? '');
    } catch {
      return l;
    }
  });
  return {
    exitCode: exited?.code,
    bindingLine: msgs.find((m) => BINDING_LINE.test(m)),
    becameReady: msgs.includes('ready'),
    keys: await countKeys(o.etcd, `${o.prefix}/regions/${o.wrongRegion}/`),
    tookMs,
  };
}

/**
 * The report's notes of one wrong-region node, its safety violation (it became ready or claimed a slot: it could
 * mint another region's IDs, which fails the run) and the expectation missed (the refusal was not the one line and
 * exit 2, or etcd could not be asked: reported).
 */
export function judgeWrongRegion(
  w: WrongRegionOutcome,
  region: number,
  wrongRegion: number,
): { notes: string[]; expectationMissed: string | undefined; safetyViolation: string | undefined } {
  const refused = w.exitCode === EXIT_REGION_REFUSED && w.bindingLine !== undefined && !w.becameReady && w.keys === 0;
  const notes = [
    refused
      ? `refused: exit ${EXIT_REGION_REFUSED} after ${(w.tookMs / 1000).toFixed(1)} s, "${w.bindingLine ?? ''}"`
      : `exit ${w.exitCode === undefined ? 'none (stopped after the time limit)' : String(w.exitCode)} after ${(w.tookMs / 1000).toFixed(1)} s${w.bindingLine !== undefined ? `, "${w.bindingLine}"` : ', no binding line'}`,
    `became ready: ${w.becameReady ? 'YES' : 'no'}; keys under regions/${wrongRegion}/: ${w.keys ?? 'unknown (etcd did not answer)'}`,
  ];
  const unsafe: string[] = [];
  if (w.becameReady) unsafe.push('it became ready');
  if (w.keys !== undefined && w.keys > 0) unsafe.push(`${w.keys} key(s) under regions/${wrongRegion}/`);
  const missed: string[] = [];
  if (w.exitCode !== EXIT_REGION_REFUSED)
    missed.push(`exit ${String(w.exitCode ?? 'none')}, not ${EXIT_REGION_REFUSED}`);
  if (w.bindingLine === undefined) missed.push('no binding line');
  if (w.keys === undefined) missed.push(`keys under regions/${wrongRegion}/ unknown (etcd did not answer)`);
  const what = `a node with region ${wrongRegion} on region ${region}'s etcd`;
  return {
    notes,
    safetyViolation: unsafe.length === 0 ? undefined : `${what} could mint: ${unsafe.join('; ')}`,
    expectationMissed: missed.length === 0 ? undefined : `${what} was not refused as expected: ${missed.join('; ')}`,
  };
}

/** Fault `wrong-region-node`'s handler: a node of another region started on this region's etcd; it must refuse. */
export const wrongRegionNode: FaultHandler = async (c) => {
  const { run, record: r } = c;
  const { o } = run;
  const wrong = wrongRegionOf(o.region);
  const name = run.nextWrongRegionName();
  r.target = `${name} (region ${wrong} on region ${o.region}'s etcd)`;
  c.line();
  const w = await runWrongRegionNode({
    serverMain: o.serverMain,
    etcd: run.cluster.endpoints,
    wrongRegion: wrong,
    prefix: ETCD_PREFIX,
    slots: o.slots,
    leaseTtlSeconds: o.leaseTtlSeconds,
    dir: run.dir,
    name,
    timeoutMs: 15_000,
  });
  const judged = judgeWrongRegion(w, o.region, wrong);
  r.notes.push(...judged.notes);
  r.expectationMissed = judged.expectationMissed;
  r.safetyViolation = judged.safetyViolation;
};
