import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { freePort, serverLaunchArgs, spawnProcess, tempDirSync, type ProcessHandle } from '@idgen/testing';
import type { IdClient } from '../src/index.js';

/** The built generator node (tests start apps as processes, never import them). */
export const SERVER_MAIN = join(__dirname, '..', '..', '..', 'apps', 'server', 'dist', 'main.js');

/** Fails (never skips) when the server has not been built. */
export function requireServerBuild(): void {
  if (!existsSync(SERVER_MAIN)) {
    throw new Error(`${SERVER_MAIN} is missing: build the server first (npx nx run @idgen/server:build)`);
  }
}

/** A running `idgen-server` process. */
export interface ServerNode {
  readonly region: number;
  /** `127.0.0.1:PORT` */
  readonly address: string;
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  readonly process: ProcessHandle;
}

/** Starts `node apps/server/dist/main.js` on a free port and waits for its `ready` line. */
export async function startServer(options: {
  region: number;
  etcd?: string;
  /** `--etcd-prefix` (default `/idgen`); the caller binds it to `region` first (bindRegion, as idgen region init). */
  etcdPrefix?: string;
  leaseTtl?: number;
  /** TLS with mTLS on the serving port: the node's certificate and key, and the CA its callers' certificates come from. */
  tls?: { certFile: string; keyFile: string; clientCaFile: string };
}): Promise<ServerNode> {
  requireServerBuild();
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  const args = [
    ...serverLaunchArgs(SERVER_MAIN),
    '--time-source',
    'none',
    '--region',
    String(options.region),
    '--listen',
    address,
    '--metrics-listen',
    'off',
  ];
  if (options.etcd !== undefined) {
    args.push('--etcd', options.etcd);
    if (options.etcdPrefix !== undefined) args.push('--etcd-prefix', options.etcdPrefix);
  }
  // Without etcd: standalone by name, on a state file of its own.
  else args.push('--standalone', '--state-file', join(tempDirSync('client-standalone').path, 'state.json'));
  if (options.tls !== undefined)
    args.push(
      '--tls-cert',
      options.tls.certFile,
      '--tls-key',
      options.tls.keyFile,
      '--tls-client-ca',
      options.tls.clientCaFile,
    );
  if (options.leaseTtl !== undefined) args.push('--lease-ttl', String(options.leaseTtl));
  const child = spawnProcess(process.execPath, args);
  await child.waitForLine(/"msg":"ready"/, 30_000);
  return {
    region: options.region,
    address,
    url: `${options.tls === undefined ? 'http' : 'https'}://${address}`,
    process: child,
  };
}

/** Every ID a suite collects, to check that none was handed out twice (docs/design.md §8.1). */
export class IdLedger {
  private readonly seen = new Set<bigint>();
  readonly duplicates: bigint[] = [];

  add(...ids: bigint[]): void {
    for (const id of ids) {
      if (this.seen.has(id)) this.duplicates.push(id);
      else this.seen.add(id);
    }
  }

  get size(): number {
    return this.seen.size;
  }
}

/** The region code an ID carries. */
export function regionOf(id: bigint): number {
  return DEFAULT_LAYOUT.decompose(id).region;
}

/** The worker slot an ID carries. */
export function workerOf(id: bigint): number {
  return DEFAULT_LAYOUT.decompose(id).worker;
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` every 50 ms until it returns true; throws `what` after `timeoutMs`. */
export async function waitUntil(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 20_000,
): Promise<void> {
  const until = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await sleep(50);
  }
}

/** What a steady load saw. */
export interface LoadReport {
  calls: number;
  failures: unknown[];
  maxLatencyMs: number;
  regions: Map<number, number>;
}

/**
 * Callers that each call `nextId()` then pause `pauseMs`, round the given clients, until stopped:
 * a steady stream of calls, every ID recorded in the ledger.
 */
export function steadyLoad(
  clients: readonly IdClient[],
  options: { callersPerClient: number; pauseMs: number; ledger: IdLedger },
) {
  let stopped = false;
  const report: LoadReport = { calls: 0, failures: [], maxLatencyMs: 0, regions: new Map() };
  const loops = clients.flatMap((client) =>
    Array.from({ length: options.callersPerClient }, async () => {
      while (!stopped) {
        const t0 = performance.now();
        try {
          const id = await client.nextId();
          options.ledger.add(id);
          const region = regionOf(id);
          report.regions.set(region, (report.regions.get(region) ?? 0) + 1);
        } catch (e) {
          report.failures.push(e);
        }
        report.calls++;
        report.maxLatencyMs = Math.max(report.maxLatencyMs, performance.now() - t0);
        await sleep(options.pauseMs);
      }
    }),
  );
  return {
    report,
    async stop(): Promise<LoadReport> {
      stopped = true;
      await Promise.all(loops);
      return report;
    },
  };
}
