// Integration-test support: starts the BUILT server (`apps/server/dist/main.js`, the app's test target
// depends on its build) as a real process, and talks to it and to etcd over loopback.
import { existsSync } from 'node:fs';
import { connect as connectHttp2 } from 'node:http2';
import { connect as connectTcp } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type Client } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { createEtcdClient, type EtcdTlsOptions } from '@idgen/lease';
import { initRegion } from '@idgen/lease/operator';
import { IdGenerator } from '@idgen/proto';
import { serverLaunchArgs, spawnProcess, tempDirSync, type ProcessHandle } from '@idgen/testing';

/** The compiled entry point the tests run. */
export const MAIN_JS = join(__dirname, '..', 'dist', 'main.js');
/** The `idgen-server` command, whose first line holds the node's launch flags. */
export const BIN_JS = join(__dirname, '..', 'bin', 'idgen-server.js');
/** `node` argv starting the node as its command does (the Dockerfile, the systemd unit, `npm start`, these tests). */
export const NODE_ARGV = serverLaunchArgs(MAIN_JS);

function assertBuilt(): void {
  if (!existsSync(MAIN_JS)) {
    throw new Error(`${MAIN_JS} is missing: build first (npx nx run @idgen/server:build; the test target does it)`);
  }
}

/** One pino line, parsed. */
export type LogLine = Record<string, unknown> & { msg?: string; level?: string };

/** Parses a JSON log line; `undefined` for anything else. */
export function parseLine(line: string): LogLine | undefined {
  try {
    const v: unknown = JSON.parse(line);
    return typeof v === 'object' && v !== null ? (v as LogLine) : undefined;
  } catch {
    return undefined;
  }
}

/** A running `idgen-server` process. */
export interface ServerNode {
  readonly process: ProcessHandle;
  /** `http://127.0.0.1:PORT` of the serving port. */
  readonly baseUrl: string;
  readonly port: number;
  /** `http://127.0.0.1:PORT/metrics`, when metrics are on. */
  readonly metricsUrl: string | undefined;
  /** Waits for the `ready` log line and returns it. */
  ready(timeoutMs?: number): Promise<LogLine>;
  /** Parsed log lines so far. */
  logs(): LogLine[];
  /** SIGTERM, wait (never rejects). */
  stop(graceMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** A fresh state file path for a standalone node, in a temporary directory removed after the test file. */
export function standaloneStateFile(): string {
  return join(tempDirSync('standalone').path, 'state.json');
}

/**
 * A standalone state file in memory (/dev/shm) where the machine has one: for the suites that test the transport
 * under load, not the disk. The standalone lease fences for good when a write and sync of its state file takes past
 * its 3.5 s proof window (docs/design.md §6), and on a shared disk under other work one did ("last proven held 7185
 * ms ago"), failing every later probe of the abuse suites on a fence no attack caused.
 */
export function memoryStateFile(): string {
  return join(tempDirSync('standalone', existsSync('/dev/shm') ? '/dev/shm' : tmpdir()).path, 'state.json');
}

/** Runs `node <launch flags> dist/main.js args` and returns at once (no waiting). */
export function spawnServer(args: readonly string[], env: NodeJS.ProcessEnv = {}): ProcessHandle {
  assertBuilt();
  // The child must not inherit IDGEN_* from the developer's shell: only what the test gives it.
  const clean: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('IDGEN_')) clean[k] = v;
  return spawnProcess(process.execPath, [...NODE_ARGV, ...args], { env: { ...clean, ...env } });
}

/**
 * Starts a server on free ports (`--listen 127.0.0.1:0`, metrics likewise unless `args` says otherwise)
 * and waits until its serving port is open (not until ready: see {@link ServerNode.ready}).
 */
export async function startServer(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<ServerNode> {
  const full = [...args];
  // Without etcd, a node is standalone by name, on a state file of its own (docs/design.md §6).
  if (!full.includes('--etcd') && env['IDGEN_ETCD'] === undefined) {
    if (!full.includes('--standalone') && env['IDGEN_STANDALONE'] === undefined) full.push('--standalone');
    if (!full.includes('--state-file') && env['IDGEN_STATE_FILE'] === undefined)
      full.push('--state-file', standaloneStateFile());
  }
  if (!full.includes('--listen') && env['IDGEN_LISTEN'] === undefined) full.push('--listen', '127.0.0.1:0');
  if (!full.includes('--metrics-listen') && env['IDGEN_METRICS_LISTEN'] === undefined)
    full.push('--metrics-listen', '127.0.0.1:0');
  const proc = spawnServer(full, env);
  const open = parseLine(await proc.waitForLine(/"msg":"serving port open/, 15_000));
  const listen = String(open?.['listen'] ?? '');
  const port = Number(listen.split(':').pop());
  const metricsFlag = full.indexOf('--metrics-listen');
  const metricsSetting = metricsFlag >= 0 ? full[metricsFlag + 1] : env['IDGEN_METRICS_LISTEN'];
  let metricsUrl: string | undefined;
  if (metricsSetting !== 'off' && metricsSetting !== '') {
    const m = parseLine(await proc.waitForLine(/"msg":"metrics listening"/, 5_000));
    metricsUrl = String(m?.['metrics'] ?? '');
  }
  return {
    process: proc,
    baseUrl: `http://127.0.0.1:${port}`,
    port,
    metricsUrl,
    async ready(timeoutMs = 20_000) {
      return parseLine(await proc.waitForLine(/"msg":"ready"/, timeoutMs)) ?? {};
    },
    logs: () => proc.lines.map(parseLine).filter((l): l is LogLine => l !== undefined),
    stop: (graceMs) => proc.stop(graceMs),
  };
}

/** The three ways a caller reaches NextIds (docs/design.md §6), each with the generated client. */
export type Protocol = 'connect-json-http1' | 'connect-binary-h2' | 'grpc-h2';
export const PROTOCOLS: readonly Protocol[] = ['connect-json-http1', 'connect-binary-h2', 'grpc-h2'];

/** A generated IdGenerator client over `protocol`. */
export function idClient(baseUrl: string, protocol: Protocol): Client<typeof IdGenerator> {
  switch (protocol) {
    case 'connect-json-http1':
      return createClient(IdGenerator, createConnectTransport({ baseUrl, httpVersion: '1.1', useBinaryFormat: false }));
    case 'connect-binary-h2':
      return createClient(IdGenerator, createConnectTransport({ baseUrl, httpVersion: '2', useBinaryFormat: true }));
    case 'grpc-h2':
      return createClient(IdGenerator, createGrpcTransport({ baseUrl }));
  }
}

/** Expands blocks into IDs. */
export function idsOf(blocks: readonly { first: bigint; count: number }[]): bigint[] {
  const out: bigint[] = [];
  for (const b of blocks) for (let i = 0; i < b.count; i++) out.push(b.first + BigInt(i));
  return out;
}

/** Decodes an ID with the default layout. */
export function decode(id: bigint): { region: number; worker: number; sequence: number; timestampMs: number } {
  const f = DEFAULT_LAYOUT.decompose(id);
  return { region: f.region, worker: f.worker, sequence: f.sequence, timestampMs: Number(f.timestampMs) };
}

/** POSTs a raw body to an RPC path over HTTP/1.1 and returns status, headers and text. */
export async function rawPost(
  baseUrl: string,
  path: string,
  body: string | Uint8Array,
  contentType: string,
): Promise<{ status: number; text: string; headers: Headers }> {
  const res = await fetch(`${baseUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': contentType },
    body,
    signal: AbortSignal.timeout(10_000),
  });
  return { status: res.status, text: await res.text(), headers: res.headers };
}

/**
 * `idgen region init --region code` against a TLS or authenticated etcd (plaintext ones: @idgen/testing's bindRegion),
 * with @idgen/lease's initRegion, before the region's first node starts. `auth` must be a user that may write the prefix.
 */
export async function initRegionSecured(
  clientUrl: string,
  code: number,
  options: { tls?: EtcdTlsOptions; auth?: { username: string; password: string }; prefix?: string },
): Promise<void> {
  const client = createEtcdClient({ endpoints: [clientUrl], tls: options.tls, auth: options.auth });
  try {
    await initRegion({ client, prefix: options.prefix ?? '/idgen', timeoutMs: 5_000, layout: DEFAULT_LAYOUT }, code);
  } finally {
    client.close();
  }
}

/** Reads keys from etcd through its JSON gateway (no client library: the app does not depend on etcd3). */
export async function etcdRange(
  clientUrl: string,
  key: string,
  prefix = false,
): Promise<{ key: string; value: string; lease?: string }[]> {
  const b64 = (s: string): string => Buffer.from(s).toString('base64');
  const body: Record<string, string> = { key: b64(key) };
  if (prefix) {
    // range_end = key with its last byte + 1: every key starting with `key`.
    const end = Buffer.from(key);
    end[end.length - 1] = (end[end.length - 1] ?? 0) + 1;
    body['range_end'] = end.toString('base64');
  }
  const res = await fetch(`${clientUrl}/v3/kv/range`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
    signal: AbortSignal.timeout(5_000),
  });
  const json = (await res.json()) as { kvs?: { key: string; value?: string; lease?: string }[] };
  return (json.kvs ?? []).map((kv) => ({
    key: Buffer.from(kv.key, 'base64').toString(),
    value: kv.value === undefined ? '' : Buffer.from(kv.value, 'base64').toString(),
    ...(kv.lease !== undefined ? { lease: kv.lease } : {}),
  }));
}

/** Polls `check` every 50 ms until it returns true; rejects with `what` after `timeoutMs`. */
export async function waitFor(
  what: string,
  check: () => Promise<boolean> | boolean,
  timeoutMs = 15_000,
): Promise<void> {
  const start = Date.now();
  for (;;) {
    if (await check()) return;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Sleeps. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** One raw gRPC call over h2c with a hand-made frame: the HTTP status and the grpc-status trailer. */
export function rawGrpc(
  baseUrl: string,
  path: string,
  payload: Uint8Array,
): Promise<{ status: number; grpcStatus: string; grpcMessage: string }> {
  return new Promise((resolve, reject) => {
    const session = connectHttp2(baseUrl);
    session.on('error', reject);
    const frame = Buffer.alloc(5 + payload.length);
    frame.writeUInt32BE(payload.length, 1);
    frame.set(payload, 5);
    const stream = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    let status = 0;
    let headerStatus: string | undefined;
    let headerMessage: string | undefined;
    stream.on('response', (h) => {
      status = Number(h[':status']);
      headerStatus = h['grpc-status'] as string | undefined;
      headerMessage = h['grpc-message'] as string | undefined;
    });
    let trailers: Record<string, unknown> = {};
    stream.on('trailers', (t) => {
      trailers = t;
    });
    stream.on('error', reject);
    stream.resume();
    stream.on('close', () => {
      session.close();
      resolve({
        status,
        grpcStatus: String(trailers['grpc-status'] ?? headerStatus ?? ''),
        grpcMessage: decodeURIComponent(String(trailers['grpc-message'] ?? headerMessage ?? '')),
      });
    });
    stream.end(frame);
  });
}

/**
 * Opens a TCP connection, writes `bytes`, then stalls; resolves with how the server ended it
 * (`closed` after `ms`), or `open` if it was still open after `waitMs`.
 */
export function stallAfter(
  port: number,
  bytes: string,
  waitMs: number,
): Promise<{ outcome: 'closed' | 'open'; ms: number; reply: string }> {
  return new Promise((resolve) => {
    const start = Date.now();
    const socket = connectTcp(port, '127.0.0.1', () => socket.write(bytes));
    let reply = '';
    socket.on('data', (d) => {
      reply += d.toString('latin1');
    });
    socket.on('error', () => undefined);
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ outcome: 'open', ms: Date.now() - start, reply });
    }, waitMs);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ outcome: 'closed', ms: Date.now() - start, reply });
    });
  });
}
