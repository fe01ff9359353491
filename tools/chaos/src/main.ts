/**
 * `npm run chaos`: proves there are no duplicates under faults (issue 7). See README.md.
 *
 * `node tools/chaos/dist/main.js [--duration 105] [--seed N] [--out DIR] [--callers 3] [--embedded 3] [--nodes 4] [--slots 3]
 *  [--rate 1000] [--lease-ttl 3] [--faults KIND,…] [--regions N] [--netns] [--server-main PATH] [--cli-main PATH]
 *  [--previous-server PATH]`
 *
 * Exit codes: 0 every rule held; 1 a rule was violated or the run could not be set up; 2 bad flags;
 * 130 interrupted (everything started is cleaned up either way).
 */
import { randomInt } from 'node:crypto';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { cleanupAll } from '@idgen/testing';
import { formatReport, passed, reportJson } from './report.js';
import { defaultPaths, runChaos, type ChaosOptions } from './run.js';
import { REGION_NODES } from './regions.js';
import {
  FAULT_KINDS,
  OPT_IN_FAULT_KINDS,
  REGION_FAULT_KINDS,
  NETNS_FAULT_KINDS,
  FULL_ROUND_SECONDS,
  createSchedule,
  formatFault,
  parseFaultKinds,
  type FaultKind,
} from './schedule.js';

const USAGE = `usage: npm run chaos -- [--duration <s>] [--seed <n>] [--out <dir>] [--callers <n>] [--embedded <n>] [--nodes <n>] [--slots <n>] [--rate <ids/s>] [--lease-ttl <s>] [--faults <kinds>] [--regions <n>] [--netns] [--server-main <path>] [--cli-main <path>] [--previous-server <path>]
  --duration   seconds of load with faults (default ${FULL_ROUND_SECONDS}: one round of every fault kind; longer runs repeat them)
  --seed       schedule seed (default random, printed: the same seed gives the same schedule)
  --out        keep every artifact (caller ID files, node logs, report.json) in this directory
  --callers    caller processes (default 3)
  --embedded   embedded callers (@idgen/embedded in their own processes, slots 18 and up, one a spare; default 3, 0: none)
  --nodes      generator nodes (default 4)
  --slots      worker slots the nodes share (default 3: one node is a spare)
  --rate       IDs per second per caller (default 1000)
  --lease-ttl  lease TTL in seconds (default 3, short so faults fit a short run)
  --faults     only these fault kinds, comma-separated (default all: ${FAULT_KINDS.join(', ')}; with --regions also ${REGION_FAULT_KINDS.join(', ')};
               opt-in, named here or added by --previous-server: ${OPT_IN_FAULT_KINDS.join(', ')})
  --regions    regions (default 1; 3 to 8: regions 2 … N each get a one-member etcd bound to their code, ${REGION_NODES} nodes and
               callers; every caller falls back to the other regions; adds the region kinds and the failover table)
  --netns      run node n1 in its own network namespace, reaching etcd through a router namespace, and add the kind
               ${NETNS_FAULT_KINDS.join(', ')} (a silent cut in the router: no RST, kernels retransmit; its callers still reach
               it). Needs root and iproute2: without them the run fails, it never falls back to the proxy
  --server-main  run the nodes from this build of the server (default this checkout's apps/server/dist/main.js),
               e.g. another commit's worktree: the same harness and verification against older code
  --cli-main   the operator's idgen the faults run (spare lend, region restored; default that build's
               apps/cli/dist/main.js beside --server-main, else this checkout's); the final audit is this checkout's rules, in process
  --previous-server  a previous release's bin/idgen-server.js (or dist/main.js): each rolling-restart alternates the
               nodes' build, the 1st to this release, the 2nd back to the tree's, …: a rolling upgrade and rollback under
               load; adds rolling-restart to the default kinds. Install 0.1.0 from its tarballs, no registry needed:
                 npm install --prefix /tmp/idgen-0.1.0 --no-audit --no-fund tools/registry-check/releases/0.1.0/*.tgz
                 --previous-server /tmp/idgen-0.1.0/node_modules/@idgen/server/bin/idgen-server.js`;

function say(line: string): void {
  process.stdout.write(`${line}\n`);
}

function parse(argv: string[]): Omit<
  ChaosOptions,
  'signal' | 'say' | 'serverMain' | 'callerMain' | 'relayMain' | 'embeddedMain' | 'cliMain'
> & {
  serverMain?: string;
} {
  const { values } = parseArgs({
    args: argv,
    options: {
      duration: { type: 'string', default: String(FULL_ROUND_SECONDS) },
      seed: { type: 'string' },
      out: { type: 'string' },
      callers: { type: 'string', default: '3' },
      embedded: { type: 'string', default: '3' },
      nodes: { type: 'string', default: '4' },
      slots: { type: 'string', default: '3' },
      rate: { type: 'string', default: '1000' },
      'lease-ttl': { type: 'string', default: '3' },
      faults: { type: 'string' },
      regions: { type: 'string', default: '1' },
      netns: { type: 'boolean', default: false },
      'server-main': { type: 'string' },
      'cli-main': { type: 'string' },
      'previous-server': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help === true) {
    say(USAGE);
    process.exit(0);
  }
  const int = (name: string, v: string | undefined, min: number, max: number): number => {
    const x = Number(v);
    if (v === undefined || !/^\d+$/.test(v) || x < min || x > max)
      throw new RangeError(`--${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
    return x;
  };
  const nodes = int('nodes', values.nodes, 1, 16);
  const slots = int('slots', values.slots, 1, 128);
  const kinds: FaultKind[] | undefined = values.faults === undefined ? undefined : parseFaultKinds(values.faults);
  const regions = values.regions === '1' ? 1 : int('regions', values.regions, 3, 8);
  const regionKinds = (kinds ?? []).filter((k) => (REGION_FAULT_KINDS as readonly string[]).includes(k));
  if (regions < 2 && regionKinds.length > 0)
    throw new RangeError(`--faults ${regionKinds.join(',')} needs --regions 3 or more`);
  const netnsKinds = (kinds ?? []).filter((k) => (NETNS_FAULT_KINDS as readonly string[]).includes(k));
  if (values.netns !== true && netnsKinds.length > 0)
    throw new RangeError(`--faults ${netnsKinds.join(',')} needs --netns`);
  if (values['server-main'] !== undefined && values['server-main'] === '')
    throw new RangeError('--server-main needs a path');
  const previous = values['previous-server'];
  if (previous !== undefined && !existsSync(previous))
    throw new RangeError(`--previous-server ${previous} does not exist (see --help: install the release's tarballs)`);
  return {
    durationMs: int('duration', values.duration, 20, 24 * 3600) * 1000,
    seed: values.seed === undefined ? randomInt(2 ** 31) : int('seed', values.seed, 0, 2 ** 32 - 1),
    ...(values.out !== undefined ? { outDir: values.out } : {}),
    callers: int('callers', values.callers, 1, 32),
    embedded: values.embedded === '0' ? 0 : int('embedded', values.embedded, 2, 16),
    nodes,
    slots,
    rate: int('rate', values.rate, 10, 100_000),
    leaseTtlSeconds: int('lease-ttl', values['lease-ttl'], 2, 60),
    region: 1,
    ...(regions > 1 ? { regions } : {}),
    ...(values.netns === true ? { netns: true } : {}),
    ...(kinds !== undefined ? { kinds } : {}),
    ...(previous !== undefined ? { previousServer: resolve(previous) } : {}),
    ...operatorCliOf(values['cli-main'], values['server-main']),
    ...(values['server-main'] !== undefined
      ? { serverMain: resolve(values['server-main']), serverMainFlag: values['server-main'] }
      : {}),
  };
}

/** `--cli-main`, or the CLI of the `--server-main` build's tree (`…/apps/server/dist/main.js` → `…/apps/cli/dist/main.js`). */
function operatorCliOf(cliMain: string | undefined, serverMain: string | undefined): { operatorCliMain?: string } {
  if (cliMain === '') throw new RangeError('--cli-main needs a path');
  if (cliMain !== undefined) return { operatorCliMain: resolve(cliMain) };
  const beside = serverMain === undefined ? undefined : resolve(serverMain, '..', '..', '..', 'cli', 'dist', 'main.js');
  return beside !== undefined && existsSync(beside) ? { operatorCliMain: beside } : {};
}

async function main(): Promise<number> {
  let flags;
  try {
    flags = parse(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`chaos: ${e instanceof Error ? e.message : String(e)}\n${USAGE}\n`);
    return 2;
  }
  const defaults = defaultPaths(__dirname);
  const paths = { ...defaults, serverMain: flags.serverMain ?? defaults.serverMain };
  if (!existsSync(paths.serverMain)) {
    process.stderr.write(
      flags.serverMain !== undefined
        ? `chaos: --server-main ${paths.serverMain} does not exist (build that checkout's server: npx nx run @idgen/server:build)\n`
        : `chaos: ${paths.serverMain} is missing: build the server first (npx nx run @idgen/server:build; npm run chaos builds both)\n`,
    );
    return 1;
  }

  const abort = new AbortController();
  let interrupted = false;
  const onSignal = (sig: string): void => {
    if (interrupted) return;
    interrupted = true;
    say(`\nchaos: ${sig}: stopping and cleaning up`);
    abort.abort(new Error(sig));
  };
  process.on('SIGINT', () => onSignal('SIGINT'));
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  // A crash still cleans up: the registry's exit hook SIGKILLs what is left and removes temp dirs.
  process.on('uncaughtException', (e) => {
    process.stderr.write(`chaos: crashed: ${e.stack ?? e.message}\n`);
    void cleanupAll().finally(() => process.exit(1));
  });

  const schedule = createSchedule({
    durationMs: flags.durationMs,
    seed: flags.seed,
    leaseTtlMs: flags.leaseTtlSeconds * 1000,
    ...(flags.kinds !== undefined ? { kinds: flags.kinds } : {}),
    ...(flags.regions !== undefined ? { regions: flags.regions } : {}),
    ...(flags.netns === true ? { netns: true } : {}),
    optIn: flags.previousServer !== undefined,
  });
  say(
    `idgen chaos: seed ${flags.seed}, ${flags.durationMs / 1000} s, ${flags.nodes} nodes on ${flags.slots} slots, ${flags.callers} callers and ${flags.embedded} embedded callers at ${flags.rate} IDs/s, lease TTL ${flags.leaseTtlSeconds} s`,
  );
  if (flags.regions !== undefined)
    say(
      `regions: ${flags.regions} (region 1 as above; regions 2-${flags.regions}: ${REGION_NODES} nodes each, one-member etcd)`,
    );
  if (flags.netns === true)
    say('netns: n1 in its own network namespace, etcd through a router namespace (netns-partition cuts it there)');
  if (flags.kinds !== undefined) say(`fault kinds: only ${flags.kinds.join(', ')} (--faults)`);
  if (flags.serverMain !== undefined) say(`server: ${paths.serverMain} (--server-main)`);
  if (flags.previousServer !== undefined)
    say(`previous release: ${flags.previousServer} (--previous-server: rolling-restart alternates it with the tree's)`);
  if (flags.operatorCliMain !== undefined) say(`operator CLI for the faults: ${flags.operatorCliMain}`);
  say('fault schedule (t from the start of the load):');
  for (const f of schedule.faults) say(`  ${formatFault(f)}`);
  if (schedule.missing.length > 0)
    say(
      `  not fitting into ${flags.durationMs / 1000} s: ${schedule.missing.join(', ')} (use --duration ${FULL_ROUND_SECONDS} or more)`,
    );

  // Bounded in time (issue 7): the whole run, setup and teardown included, has a hard limit.
  const watchdog = setTimeout(
    () => onSignal('watchdog (run took far longer than its duration)'),
    flags.durationMs + 5 * 60_000,
  );
  watchdog.unref();
  const t0 = Date.now();
  try {
    const result = await runChaos({ ...flags, ...paths, signal: abort.signal, say });
    const lines = formatReport(result);
    say('');
    for (const l of lines) say(l);
    if (flags.outDir !== undefined) {
      await writeFile(join(flags.outDir, 'report.txt'), `${lines.join('\n')}\n`);
      await writeFile(join(flags.outDir, 'report.json'), reportJson(result));
      say(`artifacts kept in ${flags.outDir}`);
    }
    say(`total wall time ${((Date.now() - t0) / 1000).toFixed(0)} s`);
    return passed(result) ? 0 : 1;
  } catch (e) {
    if (interrupted) return 130;
    process.stderr.write(`chaos: the run failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    return 1;
  } finally {
    clearTimeout(watchdog);
    await cleanupAll().catch((e: unknown) => process.stderr.write(`chaos: cleanup: ${String(e)}\n`));
  }
}

void main().then((code) => process.exit(code));
