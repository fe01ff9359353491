import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { isIPv4, isIPv6 } from 'node:net';
import { track } from './registry.js';

/**
 * How a {@link TestDnsServer} misbehaves: `servfail` answers every query with SERVFAIL, `silent` drops every
 * query (the resolver's deadline is what ends its wait).
 */
export type TestDnsFailure = 'servfail' | 'silent';

/** A DNS server on loopback answering A and AAAA queries for names a test sets and changes. */
export interface TestDnsServer {
  /** `127.0.0.1:<port>`, the form `Resolver.setServers` takes. */
  readonly address: string;
  readonly port: number;
  /** Sets the records of `name` (IPv4 addresses answer A, IPv6 ones AAAA); `[]` keeps the name with no records. */
  set(name: string, addresses: readonly string[]): void;
  /** Forgets `name`: its queries get NXDOMAIN. */
  remove(name: string): void;
  /** Starts (`servfail`, `silent`) or ends (`undefined`) a failure. */
  fail(mode: TestDnsFailure | undefined): void;
  /** Queries received so far, of `name` (any type) or of every name. */
  queries(name?: string): number;
  /** Stops listening; safe to call twice. */
  close(): Promise<void>;
}

const TYPE_A = 1;
const TYPE_AAAA = 28;
const CLASS_IN = 1;
const RCODE_SERVFAIL = 2;
const RCODE_NXDOMAIN = 3;
const RCODE_NOTIMP = 4;

/** One parsed question (RFC 1035 §4.1.2); `end` is the offset after it. */
interface Question {
  readonly name: string;
  readonly type: number;
  readonly klass: number;
  readonly end: number;
}

/** Reads the first question of a query; `undefined` for anything malformed or compressed (queries never are). */
function parseQuestion(msg: Buffer): Question | undefined {
  if (msg.length < 12 || msg.readUInt16BE(4) < 1) return undefined;
  const labels: string[] = [];
  let at = 12;
  for (;;) {
    if (at >= msg.length) return undefined;
    const len = msg[at] as number;
    at++;
    if (len === 0) break;
    if (len > 63 || at + len > msg.length) return undefined;
    labels.push(msg.toString('ascii', at, at + len));
    at += len;
  }
  if (at + 4 > msg.length) return undefined;
  return {
    name: labels.join('.').toLowerCase(),
    type: msg.readUInt16BE(at),
    klass: msg.readUInt16BE(at + 2),
    end: at + 4,
  };
}

/** The 16 bytes of an IPv6 address (RFC 4291 text form, `::` allowed, no embedded IPv4). */
function ipv6Bytes(address: string): Buffer {
  const [head = '', tail] = address.split('::');
  const part = (s: string): string[] => (s === '' ? [] : s.split(':'));
  const left = part(head);
  const right = tail === undefined ? [] : part(tail);
  const groups = [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

/** One answer record: a pointer to the question's name (offset 12), type, class IN, TTL 0 (never cached), data. */
function answerRecord(type: number, address: string): Buffer {
  const data = type === TYPE_A ? Buffer.from(address.split('.').map(Number)) : ipv6Bytes(address);
  const rr = Buffer.alloc(12 + data.length);
  rr.writeUInt16BE(0xc00c, 0);
  rr.writeUInt16BE(type, 2);
  rr.writeUInt16BE(CLASS_IN, 4);
  rr.writeUInt32BE(0, 6);
  rr.writeUInt16BE(data.length, 10);
  data.copy(rr, 12);
  return rr;
}

/** The response to `query`: its header and question echoed, flags QR|RD(copied)|RA, `rcode`, `answers`. */
function response(query: Buffer, q: Question | undefined, rcode: number, answers: readonly Buffer[]): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt16BE(query.readUInt16BE(0), 0);
  header.writeUInt16BE(0x8080 | (query.readUInt16BE(2) & 0x0100) | rcode, 2);
  header.writeUInt16BE(q === undefined ? 0 : 1, 4);
  header.writeUInt16BE(answers.length, 6);
  const question = q === undefined ? Buffer.alloc(0) : query.subarray(12, q.end);
  return Buffer.concat([header, question, ...answers]);
}

/**
 * Starts a DNS server on UDP 127.0.0.1 (a free port) that answers A and AAAA queries from the records the test
 * sets (RFC 1035 encoding by hand: a real resolver, `node:dns`'s `Resolver`, talks to it as to any server).
 * Unknown names get NXDOMAIN, other query types NOTIMP. Tracked by the cleanup registry.
 */
export async function startDnsServer(): Promise<TestDnsServer> {
  const records = new Map<string, readonly string[]>();
  const counts = new Map<string, number>();
  let total = 0;
  let failure: TestDnsFailure | undefined;
  const socket: Socket = createSocket('udp4');

  const answer = (msg: Buffer): Buffer | undefined => {
    if (msg.length < 12) return undefined;
    const q = parseQuestion(msg);
    if (q !== undefined) counts.set(q.name, (counts.get(q.name) ?? 0) + 1);
    total++;
    if (failure === 'silent') return undefined;
    if (failure === 'servfail') return response(msg, q, RCODE_SERVFAIL, []);
    if (q === undefined || q.klass !== CLASS_IN || (q.type !== TYPE_A && q.type !== TYPE_AAAA))
      return response(msg, q, RCODE_NOTIMP, []);
    const addresses = records.get(q.name);
    if (addresses === undefined) return response(msg, q, RCODE_NXDOMAIN, []);
    const fits = q.type === TYPE_A ? isIPv4 : isIPv6;
    return response(
      msg,
      q,
      0,
      addresses.filter((a) => fits(a)).map((a) => answerRecord(q.type, a)),
    );
  };
  socket.on('message', (msg: Buffer, from: RemoteInfo) => {
    const out = answer(msg);
    if (out !== undefined) socket.send(out, from.port, from.address);
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(0, '127.0.0.1', () => {
      socket.off('error', reject);
      resolve();
    });
  });
  socket.on('error', () => undefined); // a send to a gone resolver port: nothing to do
  const port = socket.address().port;
  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    untrack();
    await new Promise<void>((resolve) => socket.close(() => resolve()));
  };
  const untrack = track({
    cleanup: close,
    cleanupSync: () => {
      if (!closed) socket.close();
      closed = true;
    },
  });
  return {
    address: `127.0.0.1:${port}`,
    port,
    set(name, addresses) {
      for (const a of addresses) {
        if (!isIPv4(a) && !isIPv6(a)) throw new RangeError(`set(${name}): not an IP address: ${a}`);
        if (isIPv6(a) && a.includes('.')) throw new RangeError(`set(${name}): embedded IPv4 is not supported: ${a}`);
      }
      records.set(name.toLowerCase().replace(/\.$/, ''), [...addresses]);
    },
    remove(name) {
      records.delete(name.toLowerCase().replace(/\.$/, ''));
    },
    fail(mode) {
      failure = mode;
    },
    queries(name) {
      return name === undefined ? total : (counts.get(name.toLowerCase()) ?? 0);
    },
    close,
  };
}
