/**
 * One chaos embedded caller: a process that mints its own IDs with `@idgen/embedded` (docs/design.md §7), at a
 * bounded rate, and records every ID it minted as blocks for the verifier, beside the nodes' (`records.ts`). It
 * runs under libfaketime like a node (its wall clock is the run's to move) and reaches etcd through its own TCP
 * proxies (the run can cut them). Its lease logs (`lease: alive` with worker, lease id and floor) go to stdout as
 * JSON lines: the run reads its holdings from them, as from a node's log.
 *
 * Each block's `receivedMs` is true time (the monotonic clock from the process's start, which libfaketime leaves
 * alone, started at true time): the clock-bound rule compares the IDs' milliseconds with it.
 *
 * `node embedded-caller.js --name e1#1 --file F --etcd URL,… --region R --workers A-B --rate N --batch B --lease-ttl S`
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { parseArgs } from 'node:util';
import { createEmbeddedIdSource, isIdsUnavailableError, type LeaseLogger } from '@idgen/embedded';
import { embeddedNodeName, type BlockLine } from './records.js';

function parse(argv: string[]): {
  name: string;
  file: string;
  etcd: string[];
  region: number;
  workers: string;
  rate: number;
  batch: number;
  ttl: number;
} {
  const { values } = parseArgs({
    args: argv,
    options: {
      name: { type: 'string' },
      file: { type: 'string' },
      etcd: { type: 'string' },
      region: { type: 'string', default: '1' },
      workers: { type: 'string', default: '18-127' },
      rate: { type: 'string', default: '1000' },
      batch: { type: 'string', default: '10' },
      'lease-ttl': { type: 'string', default: '3' },
    },
    strict: true,
  });
  const int = (name: string, v: string | undefined, min: number): number => {
    const n = Number(v);
    if (v === undefined || !Number.isInteger(n) || n < min)
      throw new Error(`embedded-caller: --${name} must be an integer ≥ ${min}, got ${String(v)}`);
    return n;
  };
  if (values.name === undefined || values.file === undefined || values.etcd === undefined)
    throw new Error('embedded-caller: --name, --file and --etcd are required');
  return {
    name: values.name,
    file: values.file,
    etcd: values.etcd.split(','),
    region: int('region', values.region, 0),
    workers: values.workers ?? '18-127',
    rate: int('rate', values.rate, 1),
    batch: int('batch', values.batch, 1),
    ttl: int('lease-ttl', values['lease-ttl'], 2),
  };
}

/** True wall time: libfaketime moves `Date.now()`, not the monotonic clock this process started from. */
const trueNowMs = (): number => Math.round(performance.timeOrigin + performance.now());

function line(fields: Record<string, unknown>, msg: string): void {
  process.stdout.write(
    `${JSON.stringify({ ...fields, msg, trueMs: trueNowMs() }, (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}\n`,
  );
}

async function main(): Promise<void> {
  const o = parse(process.argv.slice(2));
  const out: WriteStream = createWriteStream(o.file, { flags: 'a' });
  const node = embeddedNodeName(o.name);
  const logger: LeaseLogger = { info: line, warn: line, error: line };
  const source = createEmbeddedIdSource({
    etcd: { endpoints: o.etcd },
    region: o.region,
    workers: o.workers,
    nodeId: `chaos-${o.name.replace('#', '-')}`,
    ttlSeconds: o.ttl,
    timeSource: 'none',
    deadlineMs: 500,
    slotWaitMs: 3_600_000, // a spare waits for a slot for the whole run
    logger,
  });
  let stopping = false;
  let ids = 0;
  let refused = 0;
  /** Refusals by reason (`lease`, `clock-ahead`, `clock-rollback`, `not-assigned`, …). */
  const refusedBy: Record<string, number> = {};
  /** Records minted IDs as blocks of consecutive values (one worker's IDs within a millisecond are). */
  const record = (minted: readonly bigint[]): void => {
    const receivedMs = trueNowMs();
    let lines = '';
    let first = minted[0];
    let count = 0;
    for (const id of minted) {
      if (first !== undefined && id === first + BigInt(count)) {
        count++;
        continue;
      }
      if (first !== undefined)
        lines += `${JSON.stringify({ node, first: first.toString(), count, receivedMs } satisfies BlockLine)}\n`;
      first = id;
      count = 1;
    }
    if (first !== undefined && count > 0)
      lines += `${JSON.stringify({ node, first: first.toString(), count, receivedMs } satisfies BlockLine)}\n`;
    out.write(lines);
    ids += minted.length;
  };
  const intervalMs = (o.batch * 1000) / o.rate;
  const loop = (async () => {
    let next = performance.now();
    for (let tick = 0; !stopping; tick++) {
      const minted: bigint[] = [];
      try {
        if (tick % 2 === 0) {
          // The hot-loop form: synchronous, refused at once while fenced (what was minted before still counts).
          for (let i = 0; i < o.batch; i++) minted.push(source.nextIdSync());
        } else {
          minted.push(...(await source.nextIds(o.batch)));
        }
      } catch (e) {
        if (stopping) break;
        if (!isIdsUnavailableError(e)) throw e;
        refused++;
        const reason = e.reason ?? 'unknown'; // an embedded source always gives one
        refusedBy[reason] = (refusedBy[reason] ?? 0) + 1;
      }
      if (minted.length > 0) record(minted);
      next = Math.max(next + intervalMs, performance.now());
      await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
    }
  })();

  const stop = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    await loop.catch(() => undefined);
    await source.close();
    await new Promise((resolve) => out.end(resolve));
    line({ name: o.name, signal, ids, refused, refusedBy }, 'embedded caller stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  line({ name: o.name, pid: process.pid }, 'embedded caller started');
  loop.catch((e: unknown) => {
    process.stderr.write(`embedded caller failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  });
}

main().catch((e: unknown) => {
  process.stderr.write(`embedded caller failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
