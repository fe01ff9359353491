/**
 * `npm run bench:server`: one idgen server node (standalone, built `apps/server/dist/main.js`) under
 * HTTP/2 load from h2load in its own process, for NextIds(1) and NextIds(100) over the Connect and gRPC
 * protocols, and in the same run a bare `node:http2` server answering a fixed body: the ceiling of this
 * stack on this machine (issue 5, "Benchmark"). The node serves h2c on @idgen/h2 (its default); a second
 * node on `--http2-server node` (node:http2, the fallback) is measured beside it for NextIds(1) over gRPC.
 *
 * Per case: req/s and IDs/s at saturation, p50 and p99 there, the share of the bare ceiling; then p50, p99
 * and p99.9 at a fixed offered load of half the measured saturation rate, twice: from several h2load
 * processes (h2load.ts `runH2loadSpread`: why) and from h2open, an open-loop generator with Poisson arrivals
 * (native/h2open.c: why h2load alone was not enough). HTTP/2 framed by hand with no header decoded
 * (raw-h2-server.ts) at idgen's half-load rate is the floor of this harness, printed beside idgen's.
 *
 * `--baseline <dir>` (`--baseline-name <text>`): another checkout's built node, measured last against this one
 * case by case at saturation, the two alternating (builds-compared.ts), `--rounds N` rounds each (default 2: on a
 * shared machine, 5 let the median step over a round that another process's load cut short); without it the report
 * is unchanged. `--builds-only`: that comparison alone.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { create, toBinary } from '@bufbuild/protobuf';
import { createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { IdGenerator, NextIdsRequestSchema, NextIdsResponseSchema } from '@idgen/proto';
import { type ProcessHandle, cleanupAll, freePort, makeTestPki, spawnProcess, tempDir } from '@idgen/testing';
import { BUILD_ROUNDS, compareBuilds, describeCheckout, formatBuildsCompared } from './builds-compared.js';
import { REPO, buildServer, serverMainIn, startIdgenServer } from './idgen-server.js';
import { describeMachine, parseBenchArgs } from './environment.js';
import { type H2loadResult, requireH2load, runH2load, runH2loadSpread } from './h2load.js';
import { type H2openResult, buildH2open, runH2open } from './h2open.js';
import { formatCount, formatNanoseconds, formatShare, formatTable } from './table.js';

const NEXT_IDS_PATH = '/idgen.v1.IdGenerator/NextIds';
/** h2load connections × streams: many requests in flight over HTTP/2, within the server's 128 streams. */
const CLIENTS = 4;
const STREAMS = 32;
/** Half load: independent h2load processes (one connection each), at most this many streams in flight each. */
const HALF_PROCESSES = 8;
const HALF_STREAMS = 16;
/** h2open's connections at half load (its arrivals are spread over them round robin). */
const POISSON_CONNECTIONS = 4;
/** The most IDs one worker may mint a second: 4,096 a millisecond (docs/design.md §2's 12-bit sequence). */
const WORKER_IDS_PER_SECOND = 4_096_000;
/** Offered rates for one process: the tail against the rate (docs/design.md §3's 25,000 req/s per node among them). */
const PER_PROCESS_RATES = [8_000, 25_000, 50_000];

interface LoadCase {
  readonly name: string;
  /** `idgen-node`: the node on `--http2-server node`; `idgen-v8-defaults`: the node without its launch flags. */
  readonly target: 'bare' | 'idgen' | 'idgen-node' | 'idgen-v8-defaults';
  readonly count: number;
  readonly headers: readonly string[];
  readonly body: Uint8Array;
}

function nextIdsBody(count: number): Uint8Array {
  return toBinary(NextIdsRequestSchema, create(NextIdsRequestSchema, { count }));
}

/** gRPC's length-prefixed message: a compression flag byte and a 4-byte big-endian length, then the message. */
function grpcFrame(message: Uint8Array): Uint8Array {
  const framed = new Uint8Array(5 + message.length);
  new DataView(framed.buffer).setUint32(1, message.length);
  framed.set(message, 5);
  return framed;
}

const CONNECT_HEADERS = ['content-type: application/proto', 'connect-protocol-version: 1'];
const GRPC_HEADERS = ['content-type: application/grpc+proto', 'te: trailers'];

/** One call per protocol through real Connect clients: the node answers correctly before it is loaded. */
async function verify(baseUrl: string): Promise<void> {
  for (const transport of [
    createConnectTransport({ baseUrl, httpVersion: '2', useBinaryFormat: true }),
    createGrpcTransport({ baseUrl }),
  ]) {
    const client = createClient(IdGenerator, transport);
    for (const count of [1, 100]) {
      const response = await client.nextIds({ count });
      const got = response.blocks.reduce((sum, block) => sum + block.count, 0);
      if (got !== count) throw new Error(`NextIds(${count}) returned ${got} IDs: the node is not serving correctly`);
    }
  }
}

/** A baseline server (baseline-server.ts) as a child process, loaded like the real server; resolves when ready. */
async function startBaseline(
  script: string,
  port: number,
  body: Uint8Array,
  ...extra: string[]
): Promise<ProcessHandle> {
  const server = spawnProcess(process.execPath, [
    join(__dirname, script),
    String(port),
    Buffer.from(body).toString('hex'),
    ...extra,
  ]);
  await server.waitForLine(/^listening /, 10_000);
  return server;
}

function micros(us: number): string {
  return formatNanoseconds(us * 1000);
}

/** Half-load latency of one case: h2load's fixed rate (bursty) and h2open's Poisson arrivals, same rate. */
interface HalfLoad {
  readonly name: string;
  readonly rate: number;
  readonly h2load: H2loadResult;
  readonly poisson: H2openResult;
}

/** The cases measured at saturation and half load, in order: the bare ceiling first (the share's denominator). */
const LOAD_CASES: readonly LoadCase[] = [
  { name: 'bare node:http2, fixed body', target: 'bare', count: 0, headers: CONNECT_HEADERS, body: nextIdsBody(1) },
  { name: 'NextIds(1), Connect', target: 'idgen', count: 1, headers: CONNECT_HEADERS, body: nextIdsBody(1) },
  { name: 'NextIds(100), Connect', target: 'idgen', count: 100, headers: CONNECT_HEADERS, body: nextIdsBody(100) },
  { name: 'NextIds(1), gRPC', target: 'idgen', count: 1, headers: GRPC_HEADERS, body: grpcFrame(nextIdsBody(1)) },
  {
    name: 'NextIds(100), gRPC',
    target: 'idgen',
    count: 100,
    headers: GRPC_HEADERS,
    body: grpcFrame(nextIdsBody(100)),
  },
  {
    name: 'NextIds(1), gRPC, on node:http2',
    target: 'idgen-node',
    count: 1,
    headers: GRPC_HEADERS,
    body: grpcFrame(nextIdsBody(1)),
  },
  {
    name: 'NextIds(1), gRPC, V8 defaults',
    target: 'idgen-v8-defaults',
    count: 1,
    headers: GRPC_HEADERS,
    body: grpcFrame(nextIdsBody(1)),
  },
];

/** What every phase of one run shares: the load generators, the servers' ports, the work directory. */
interface BenchRun {
  readonly h2load: string;
  readonly h2open: string;
  /** Measured seconds per run of a load generator (`--seconds`), after 2 s of warm-up. */
  readonly seconds: number;
  readonly workPath: string;
  readonly portOf: Readonly<Record<LoadCase['target'], number>>;
  /** The raw-h2-server.ts floor. */
  readonly rawPort: number;
  /** Every server started, stopped at the end. */
  readonly servers: ProcessHandle[];
}

/** Everything measured, for the tables. */
interface Measured {
  readonly saturated: readonly { c: LoadCase; result: H2loadResult }[];
  readonly half: readonly HalfLoad[];
  readonly floor: HalfLoad;
  readonly rawSaturated: H2loadResult;
  readonly byRate: readonly { rate: number; result: H2openResult }[];
  readonly h2cAgain: H2loadResult;
  readonly overTls: H2loadResult;
}

/** The servers' URLs checked with real clients, before and after the load. */
async function verifyIdgenNodes(run: BenchRun): Promise<void> {
  await verify(`http://127.0.0.1:${run.portOf.idgen}`);
  await verify(`http://127.0.0.1:${run.portOf['idgen-node']}`);
  await verify(`http://127.0.0.1:${run.portOf['idgen-v8-defaults']}`);
}

/** The baselines and the three idgen nodes, each answering before it is loaded. */
async function startServers(run: BenchRun): Promise<void> {
  const { servers, portOf } = run;
  // The bare server answers what NextIds(1) answers, byte for byte in size.
  const cannedResponse = toBinary(
    NextIdsResponseSchema,
    create(NextIdsResponseSchema, { blocks: [{ first: 385360699775254528n, count: 1 }] }),
  );
  servers.push(await startBaseline('bare-http2-server.js', portOf.bare, cannedResponse));
  // HTTP/2 framed by hand on node:net (raw-h2-server.ts): what Node does without node:http2.
  servers.push(await startBaseline('raw-h2-server.js', run.rawPort, cannedResponse));
  servers.push(await startIdgenServer(portOf.idgen));
  servers.push(await startIdgenServer(portOf['idgen-node'], ['--http2-server', 'node']));
  // The node's launch flags (apps/server/bin/idgen-server.js) against V8's defaults for this Node: what bounding
  // the young generation costs in throughput (on Node 20 the flag is the default; on Node 24 it is not).
  servers.push(await startIdgenServer(portOf['idgen-v8-defaults'], [], { launchFlags: false }));
  await verifyIdgenNodes(run);
}

/** Both half-load measurements of one target at one rate. */
async function halfLoad(
  run: BenchRun,
  name: string,
  port: number,
  c: LoadCase,
  bodyFile: string,
  rate: number,
  tag: string,
): Promise<HalfLoad> {
  const h2 = await runH2loadSpread(
    run.h2load,
    {
      url: `http://127.0.0.1:${port}${NEXT_IDS_PATH}`,
      bodyFile,
      headers: c.headers,
      streams: HALF_STREAMS,
      seconds: run.seconds,
      warmupSeconds: 2,
    },
    { rate, processes: HALF_PROCESSES, logPrefix: join(run.workPath, `half-${tag}`) },
  );
  const poisson = await runH2open(run.h2open, {
    host: '127.0.0.1',
    port,
    path: NEXT_IDS_PATH,
    bodyFile,
    headers: c.headers,
    rate,
    connections: POISSON_CONNECTIONS,
    warmupSeconds: 2,
    seconds: run.seconds,
    seed: 1129,
  });
  return { name, rate, h2load: h2, poisson };
}

/** h2load as fast as the server at `url` answers. */
function saturateUrl(
  run: BenchRun,
  url: string,
  bodyFile: string,
  headers: readonly string[],
  tag: string,
): Promise<H2loadResult> {
  return runH2load(run.h2load, {
    url,
    bodyFile,
    headers,
    clients: CLIENTS,
    streams: STREAMS,
    seconds: run.seconds,
    warmupSeconds: 2,
    logFile: join(run.workPath, `saturated-${tag}.log`),
  });
}

/** h2load as fast as the node on `port` answers (h2c). */
function saturate(
  run: BenchRun,
  port: number,
  bodyFile: string,
  headers: readonly string[],
  tag: string,
): Promise<H2loadResult> {
  return saturateUrl(run, `http://127.0.0.1:${port}${NEXT_IDS_PATH}`, bodyFile, headers, tag);
}

/** The body file of case `index` (written by {@link measureCases}). */
const bodyFileOf = (run: BenchRun, index: number): string => join(run.workPath, `${index}.bin`);

/** Every case of {@link LOAD_CASES} at saturation, then at half its saturated rate. */
async function measureCases(run: BenchRun): Promise<Pick<Measured, 'saturated' | 'half'>> {
  const saturated: { c: LoadCase; result: H2loadResult }[] = [];
  const half: HalfLoad[] = [];
  for (const [index, c] of LOAD_CASES.entries()) {
    const bodyFile = bodyFileOf(run, index);
    writeFileSync(bodyFile, c.body);
    const port = run.portOf[c.target];
    const result = await saturate(run, port, bodyFile, c.headers, String(index));
    saturated.push({ c, result });
    half.push(await halfLoad(run, c.name, port, c, bodyFile, result.requestsPerSecond / 2, String(index)));
    process.stdout.write(`  measured ${c.name}\n`);
  }
  return { saturated, half };
}

/**
 * The floor at the rate idgen's half-load runs offered: the same answer framed by hand with no header decoded, at
 * the mean half-load rate of the idgen cases (on @idgen/h2): like for like.
 */
async function measureFloor(
  run: BenchRun,
  half: readonly HalfLoad[],
): Promise<Pick<Measured, 'floor' | 'rawSaturated'>> {
  const idgenRates = half.filter((_, i) => LOAD_CASES[i]?.target === 'idgen').map((h) => h.rate);
  const floorRate = idgenRates.reduce((sum, rate) => sum + rate, 0) / idgenRates.length;
  const floorCase = LOAD_CASES[0] as LoadCase;
  const floorBody = bodyFileOf(run, 0);
  const floor = await halfLoad(
    run,
    'HTTP/2 framed by hand (floor)',
    run.rawPort,
    floorCase,
    floorBody,
    floorRate,
    'raw',
  );
  const rawSaturated = await saturate(run, run.rawPort, floorBody, CONNECT_HEADERS, 'raw');
  process.stdout.write('  measured HTTP/2 framed by hand on node:net (no node:http2)\n');
  return { floor, rawSaturated };
}

/** The index of NextIds(1) over gRPC in {@link LOAD_CASES}: the case the rate sweep and TLS measure. */
const grpcIndex = (): number => LOAD_CASES.findIndex((c) => c.name === 'NextIds(1), gRPC');

/** p99 against the offered rate, for one process: what the design's processes-per-node answer rests on. */
async function measureByRate(run: BenchRun): Promise<Measured['byRate']> {
  const byRate: { rate: number; result: H2openResult }[] = [];
  for (const rate of PER_PROCESS_RATES) {
    const result = await runH2open(run.h2open, {
      host: '127.0.0.1',
      port: run.portOf.idgen,
      path: NEXT_IDS_PATH,
      bodyFile: bodyFileOf(run, grpcIndex()),
      headers: GRPC_HEADERS,
      rate,
      connections: POISSON_CONNECTIONS,
      warmupSeconds: 2,
      seconds: run.seconds,
      seed: 2026,
    });
    byRate.push({ rate, result });
    process.stdout.write(`  measured NextIds(1), gRPC, Poisson at ${formatCount(rate)} req/s\n`);
  }
  return byRate;
}

/**
 * TLS (issue 15): NextIds(1) over gRPC on a node serving TLS (ALPN h2, a certificate from a test CA made here),
 * against the h2c node measured again right before it, both at saturation in the same run.
 */
async function measureTls(run: BenchRun): Promise<Pick<Measured, 'h2cAgain' | 'overTls'>> {
  const tlsPort = await freePort();
  const pki = makeTestPki({ name: 'bench-tls' });
  run.servers.push(
    await startIdgenServer(tlsPort, ['--tls-cert', pki.server.certFile, '--tls-key', pki.server.keyFile]),
  );
  const grpcBody = bodyFileOf(run, grpcIndex());
  const h2cAgain = await saturate(run, run.portOf.idgen, grpcBody, GRPC_HEADERS, 'h2c-again');
  const overTls = await saturateUrl(run, `https://127.0.0.1:${tlsPort}${NEXT_IDS_PATH}`, grpcBody, GRPC_HEADERS, 'tls');
  process.stdout.write('  measured NextIds(1), gRPC, over TLS\n');
  return { h2cAgain, overTls };
}

/** The measuring phases, in order (the sweep and TLS after the node is checked again). */
async function measure(run: BenchRun): Promise<Measured> {
  const cases = await measureCases(run);
  const floor = await measureFloor(run, cases.half);
  const byRate = await measureByRate(run);
  await verifyIdgenNodes(run);
  const tls = await measureTls(run);
  return { ...cases, ...floor, byRate, ...tls };
}

/** The bare ceiling: the first case's saturated req/s. */
const ceilingOf = (m: Measured): number => m.saturated[0]?.result.requestsPerSecond ?? Number.NaN;

function printSaturation(m: Measured): void {
  const ceiling = ceilingOf(m);
  const floorCase = LOAD_CASES[0] as LoadCase;
  process.stdout.write('\nSaturation (h2load as fast as the server answers, 128 requests in flight)\n\n');
  process.stdout.write(
    formatTable(
      [
        { header: 'case' },
        { header: 'req/s', align: 'right' },
        { header: 'IDs/s', align: 'right' },
        { header: 'p50', align: 'right' },
        { header: 'p99', align: 'right' },
        { header: 'share of bare', align: 'right' },
        { header: 'failed', align: 'right' },
      ],
      [
        ...m.saturated,
        { c: { ...floorCase, name: 'HTTP/2 framed by hand, no node:http2' }, result: m.rawSaturated },
      ].map(({ c, result }) => [
        c.name,
        formatCount(result.requestsPerSecond),
        c.count === 0 ? '—' : formatCount(result.requestsPerSecond * c.count),
        micros(result.p50Us),
        micros(result.p99Us),
        formatShare(result.requestsPerSecond, ceiling),
        String(result.failed),
      ]),
    ),
  );
}

function printHalfLoad(m: Measured): void {
  const { floor } = m;
  const over = (h: HalfLoad, i: number): string => {
    if (LOAD_CASES[i]?.target !== 'idgen') return h === floor ? '(floor)' : '—';
    const d = h.poisson.p99Us - floor.poisson.p99Us;
    return `${d >= 0 ? '+' : '−'}${micros(Math.abs(d))}`;
  };
  const halfRows = [...m.half, floor];
  process.stdout.write("\nHalf load (a fixed offered rate: half of that case's saturated req/s)\n\n");
  process.stdout.write(
    formatTable(
      [
        { header: 'case' },
        { header: 'req/s', align: 'right' },
        { header: 'h2load p50', align: 'right' },
        { header: 'h2load p99', align: 'right' },
        { header: 'h2load p99.9', align: 'right' },
        { header: 'Poisson p50', align: 'right' },
        { header: 'Poisson p99', align: 'right' },
        { header: 'Poisson p99.9', align: 'right' },
        { header: 'p99 over floor', align: 'right' },
        { header: 'late sends p99', align: 'right' },
        { header: 'failed', align: 'right' },
      ],
      halfRows.map((h, i) => [
        h.name,
        formatCount(h.rate),
        micros(h.h2load.p50Us),
        micros(h.h2load.p99Us),
        micros(h.h2load.p999Us),
        micros(h.poisson.p50Us),
        micros(h.poisson.p99Us),
        micros(h.poisson.p999Us),
        over(h, i),
        micros(h.poisson.lagP99Us),
        String(h.h2load.failed + h.poisson.failed),
      ]),
    ),
  );
  process.stdout.write(
    'h2load: 8 processes at rate/8 each; each sends its share as one burst per 10 ms timer tick (README).\n' +
      'Poisson: h2open, exponential gaps at the same total rate, each request written on time whatever the\n' +
      "  answers do (open loop); latency from its write to the end of its answer. 'late sends p99': how late\n" +
      '  h2open wrote requests against its schedule (its own delay, or all streams busy while the server stalls).\n' +
      'floor: raw-h2-server.ts, the same answer from HTTP/2 framed on node:net with no header decoded, at the idgen\n' +
      "  cases' mean half-load rate: what Node itself does here (a baseline, not a server).\n" +
      "p99 over floor: the case's Poisson p99 minus the floor's: what idgen adds above Node.\n" +
      "'on node:http2': the same node started with --http2-server node (the fallback), for comparison.\n" +
      "'V8 defaults': the same node started without its launch flags (--max-semi-space-size=16, bin/idgen-server.js).\n" +
      'failed: failed or non-2xx answers; gRPC errors travel in trailers of a 200, so the node is also checked\n' +
      '  with real Connect and gRPC clients before and after the load.\n',
  );
}

function printByRate(m: Measured): void {
  process.stdout.write('\nOne node process, NextIds(1) over gRPC, Poisson arrivals (h2open) at fixed rates\n\n');
  process.stdout.write(
    formatTable(
      [
        { header: 'offered req/s', align: 'right' },
        { header: 'p50', align: 'right' },
        { header: 'p99', align: 'right' },
        { header: 'p99.9', align: 'right' },
        { header: 'late sends p99', align: 'right' },
        { header: 'failed', align: 'right' },
      ],
      m.byRate.map(({ rate, result }) => [
        formatCount(rate),
        micros(result.p50Us),
        micros(result.p99Us),
        micros(result.p999Us),
        micros(result.lagP99Us),
        String(result.failed),
      ]),
    ),
  );
}

function printTls(m: Measured): void {
  const { h2cAgain, overTls } = m;
  process.stdout.write(
    '\nTLS on the serving port: NextIds(1) over gRPC at saturation (h2c measured right before, same run)\n\n',
  );
  process.stdout.write(
    formatTable(
      [
        { header: 'case' },
        { header: 'req/s', align: 'right' },
        { header: 'p50', align: 'right' },
        { header: 'p99', align: 'right' },
        { header: 'share of h2c', align: 'right' },
        { header: 'failed', align: 'right' },
      ],
      [
        ['h2c (plaintext)', h2cAgain],
        ['TLS 1.3, ALPN h2', overTls],
      ].map(([name, r]) => {
        const result = r as H2loadResult;
        return [
          String(name),
          formatCount(result.requestsPerSecond),
          micros(result.p50Us),
          micros(result.p99Us),
          formatShare(result.requestsPerSecond, h2cAgain.requestsPerSecond),
          String(result.failed),
        ];
      }),
    ),
  );
  process.stdout.write(
    `Target: NextIds(1) over TLS ≥ 50% of h2c: ${formatShare(overTls.requestsPerSecond, h2cAgain.requestsPerSecond)}: ` +
      `${overTls.requestsPerSecond / h2cAgain.requestsPerSecond >= 0.5 ? 'MET' : 'NOT MET'}\n`,
  );
}

/** The throughput and tail targets (issue 5), each MET or NOT MET. */
function printTargets(m: Measured): void {
  const { saturated, half, floor } = m;
  const ceiling = ceilingOf(m);
  const byName = new Map(saturated.map((r) => [r.c.name, r.result.requestsPerSecond]));
  const rate = (name: string): number => byName.get(name) ?? Number.NaN;
  const one = rate('NextIds(1), Connect');
  const oneGrpc = rate('NextIds(1), gRPC');
  const hundred = rate('NextIds(100), Connect');
  const hundredGrpc = rate('NextIds(100), gRPC');
  const idgenHalf = half.filter((_, i) => LOAD_CASES[i]?.target === 'idgen');
  const worst = (pick: (h: HalfLoad) => number): number => Math.max(...idgenHalf.map(pick));
  const worstH2load = worst((h) => h.h2load.p99Us);
  const worstPoisson = worst((h) => h.poisson.p99Us);
  const onNode = half.find((_, i) => LOAD_CASES[i]?.target === 'idgen-node');
  process.stdout.write(
    `\nTarget: NextIds(1) ≥ 60% of the bare ceiling: Connect ${formatShare(one, ceiling)}, ` +
      `gRPC ${formatShare(oneGrpc, ceiling)}: ${Math.min(one, oneGrpc) / ceiling >= 0.6 ? 'MET (both)' : 'NOT MET'}\n` +
      `Target: NextIds(100) within 10% of NextIds(1) in req/s: Connect ${formatShare(hundred, one)}, ` +
      `gRPC ${formatShare(hundredGrpc, oneGrpc)} of NextIds(1): ` +
      `${Math.min(hundred / one, hundredGrpc / oneGrpc) >= 0.9 ? 'MET (both)' : 'NOT MET'}\n  ` +
      `but one worker mints at most ${formatCount(WORKER_IDS_PER_SECOND)} IDs/s (12-bit sequence), so NextIds(100) cannot pass ` +
      `${formatCount(WORKER_IDS_PER_SECOND / 100)} req/s: against min(NextIds(1), that cap) it is at ` +
      `${formatShare(hundred, Math.min(one, WORKER_IDS_PER_SECOND / 100))} (Connect), ` +
      `${formatShare(hundredGrpc, Math.min(oneGrpc, WORKER_IDS_PER_SECOND / 100))} (gRPC): ` +
      `${Math.min(hundred / Math.min(one, WORKER_IDS_PER_SECOND / 100), hundredGrpc / Math.min(oneGrpc, WORKER_IDS_PER_SECOND / 100)) >= 0.9 ? 'MET (both)' : 'NOT MET'}\n` +
      `Target: p99 ≤ 2 ms at half saturation: worst idgen case ${micros(worstH2load)} (h2load), ` +
      `${micros(worstPoisson)} (Poisson): ${Math.max(worstH2load, worstPoisson) <= 2000 ? 'MET' : 'NOT MET'}; ` +
      `the floor at the same rate: ${micros(floor.h2load.p99Us)} / ${micros(floor.poisson.p99Us)}; ` +
      `on node:http2 (--http2-server node) at its own half rate (${formatCount(onNode?.rate ?? Number.NaN)} req/s): ` +
      `${micros(onNode?.h2load.p99Us ?? Number.NaN)} / ${micros(onNode?.poisson.p99Us ?? Number.NaN)}\n`,
  );
}

/**
 * `--baseline`: the baseline checkout's node (standalone, the same flags as the `idgen` node) against the `idgen`
 * node, every `idgen` case of {@link LOAD_CASES} at saturation, alternating (builds-compared.ts); both nodes are
 * checked with real clients before and after. Returns the report section.
 */
async function measureBuilds(
  run: BenchRun,
  baselineMain: string,
  labels: BuildLabels,
  rounds: number,
): Promise<string> {
  // Both nodes start here, side by side, so neither has served the report's earlier cases (a node that has is older
  // in heap and JIT state than one started fresh, which the ratio would count against it).
  const port = await freePort();
  const afterPort = await freePort();
  run.servers.push(await startIdgenServer(port, [], { main: baselineMain }));
  run.servers.push(await startIdgenServer(afterPort));
  await verify(`http://127.0.0.1:${port}`);
  await verify(`http://127.0.0.1:${afterPort}`);
  const cases = [...LOAD_CASES.entries()]
    .filter(([, c]) => c.target === 'idgen')
    .map(([index, c]) => {
      writeFileSync(bodyFileOf(run, index), c.body);
      return { name: c.name, bodyFile: bodyFileOf(run, index), headers: c.headers };
    });
  const compared = await compareBuilds(
    cases,
    { before: { label: labels.before, port }, after: { label: labels.after, port: afterPort } },
    (p, c, tag) => saturate(run, p, c.bodyFile, c.headers, tag),
    { rounds, progress: (line) => process.stdout.write(`${line}\n`) },
  );
  await verify(`http://127.0.0.1:${port}`);
  await verify(`http://127.0.0.1:${afterPort}`);
  return formatBuildsCompared(compared, run.seconds);
}

/** What the report calls the two builds of `--baseline`. */
interface BuildLabels {
  readonly before: string;
  readonly after: string;
}

/** The report's sections, in order. */
const SECTIONS: readonly ((m: Measured) => void)[] = [
  printSaturation,
  printHalfLoad,
  printByRate,
  printTls,
  printTargets,
];

async function main(): Promise<void> {
  const args = parseBenchArgs(
    process.argv.slice(2),
    { rounds: BUILD_ROUNDS, roundMs: 1, check: 1, seconds: 10 },
    { baseline: true },
  );
  let h2load: string;
  let h2open: string;
  let baselineMain: string | undefined;
  try {
    h2load = requireH2load();
    h2open = buildH2open();
    baselineMain = args.baseline === undefined ? undefined : serverMainIn(args.baseline);
  } catch (e) {
    process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
    return;
  }
  buildServer();

  process.stdout.write(
    `bench:server: ${describeMachine()}\n` +
      `saturation: h2load (1 thread) with ${CLIENTS} connections × ${STREAMS} streams, ${args.seconds} s measured per case ` +
      `after 2 s of warm-up. Half load, at half of each case's saturated req/s: h2load as ${HALF_PROCESSES} processes × 1 ` +
      `connection (≤ ${HALF_STREAMS} streams each), started apart; and h2open (tools/bench/native/h2open.c), Poisson ` +
      `arrivals over ${POISSON_CONNECTIONS} connections, open loop. The load generators, the servers and this script share the same 2 cores.\n\n`,
  );
  const labels: BuildLabels | undefined =
    args.baseline === undefined
      ? undefined
      : { before: describeCheckout(args.baseline, args.baselineName), after: describeCheckout(REPO) };
  if (labels !== undefined) {
    process.stdout.write(
      `Builds compared (--baseline), last: before = ${labels.before}; after = ${labels.after}. The machine is shared ` +
        `(other sessions, perhaps a CI run): the absolute figures move with its load; the two builds alternate ` +
        `case by case, round by round, for the same seconds, which is what makes their ratio fair.\n\n`,
    );
  }

  const work = await tempDir('idgen-bench-server');
  const [idgenPort, idgenNodePort, barePort, rawPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const idgenDefaultsPort = await freePort();
  const run: BenchRun = {
    h2load,
    h2open,
    seconds: args.seconds,
    workPath: work.path,
    portOf: { bare: barePort, idgen: idgenPort, 'idgen-node': idgenNodePort, 'idgen-v8-defaults': idgenDefaultsPort },
    rawPort,
    servers: [],
  };
  try {
    if (args.buildsOnly !== true) {
      await startServers(run);
      const measured = await measure(run);
      for (const section of SECTIONS) section(measured);
    }
    if (baselineMain !== undefined && labels !== undefined) {
      process.stdout.write(await measureBuilds(run, baselineMain, labels, args.rounds));
    }
  } finally {
    for (const server of run.servers) await server.stop(5000);
    await work.remove();
    await cleanupAll();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench:server failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
