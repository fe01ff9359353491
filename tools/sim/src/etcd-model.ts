import { EtcdLeaseInvalidError, GRPCOutOfRangeError, GRPCInvalidArgumentError } from 'etcd3';

/**
 * An in-memory model of one etcd cluster's v3 API semantics, as the `etcd3` client sees them (proto field names,
 * 64-bit numbers as decimal strings, keys and values as Buffers): a revisioned key space (create/mod revision,
 * version), compaction, transactions with compares, leases that expire on the simulated clock, watches from a past
 * revision, status, member list, and snapshot/restore (same or new cluster ID). README.md lists what it leaves out.
 *
 * It is the whole cluster seen from its clients (one linearizable store); members matter only as endpoints that can be
 * down, slow or cut off, which the transport models (sim-transport.ts).
 */

/** Time and timers the model runs on: the simulator's global fake clock, or a hand-driven one in the spec. */
export interface ModelTime {
  now(): number;
  setTimer(ms: number, fn: () => void): unknown;
  clearTimer(handle: unknown): void;
}

/** The global clock (under `@sinonjs/fake-timers` in the simulator: simulated time). */
export const globalTime: ModelTime = {
  now: () => Date.now(),
  setTimer: (ms, fn) => setTimeout(fn, ms),
  clearTimer: (h) => clearTimeout(h as NodeJS.Timeout),
};

/** A key-value as etcd keeps it; `bin` is the key as a latin1 string (byte order = string order). */
interface Kv {
  readonly key: Buffer;
  readonly value: Buffer;
  readonly createRevision: number;
  readonly modRevision: number;
  readonly version: number;
  readonly lease: string;
}

/** One entry of the history a watch replays: what happened to a key at a revision. */
interface HistoryEvent {
  readonly revision: number;
  readonly type: 'PUT' | 'DELETE';
  readonly kv: Kv;
  readonly prev: Kv | undefined;
}

interface ModelLease {
  readonly id: string;
  readonly grantedTtl: number;
  expiresAt: number;
  readonly keys: Set<string>;
  timer: unknown;
}

/** The kv, leases and revisions a snapshot keeps (`etcdctl snapshot save`). */
export interface ModelSnapshot {
  readonly revision: number;
  readonly compactRevision: number;
  readonly kvs: readonly Kv[];
  readonly leases: readonly { readonly id: string; readonly grantedTtl: number; readonly keys: readonly string[] }[];
  readonly history: readonly HistoryEvent[];
}

/** A wire-format key-value (what etcd3's proto loader yields: `longs: String`). */
export interface WireKv {
  key: Buffer;
  create_revision: string;
  mod_revision: string;
  version: string;
  value: Buffer;
  lease: string;
}

export interface WireHeader {
  cluster_id: string;
  member_id: string;
  revision: string;
  raft_term: string;
}

/** A watcher on the model: the transport turns its events into watch responses. */
export interface ModelWatch {
  readonly id: string;
  cancel(): void;
}

type Payload = Record<string, unknown>;

const ZERO_KV: Kv = {
  key: Buffer.alloc(0),
  value: Buffer.alloc(0),
  createRevision: 0,
  modRevision: 0,
  version: 0,
  lease: '0',
};

/** etcd's minimum lease TTL with the default election timeout (1 s): ceil(1.5 × election timeout). */
export const MIN_LEASE_TTL_SECONDS = 2;

function bin(b: unknown): string {
  if (b === undefined || b === null) return '';
  if (Buffer.isBuffer(b)) return b.toString('latin1');
  if (b instanceof Uint8Array) return Buffer.from(b).toString('latin1');
  return Buffer.from(String(b)).toString('latin1');
}

function num(v: unknown): number {
  if (v === undefined || v === null || v === '') return 0;
  return Number(v);
}

function wireKv(kv: Kv, keysOnly = false): WireKv {
  return {
    key: kv.key,
    create_revision: String(kv.createRevision),
    mod_revision: String(kv.modRevision),
    version: String(kv.version),
    value: keysOnly ? Buffer.alloc(0) : kv.value,
    lease: kv.lease,
  };
}

/** Whether `k` is in etcd's range [key, rangeEnd) ("\0" as range end: every key from `key`). */
function inRange(k: string, key: string, rangeEnd: string): boolean {
  if (rangeEnd === '') return k === key;
  if (rangeEnd === '\0') return k >= key;
  return k >= key && k < rangeEnd;
}

/** One simulated etcd cluster. */
export class EtcdModel {
  private kvs = new Map<string, Kv>();
  private leases = new Map<string, ModelLease>();
  private history: HistoryEvent[] = [];
  private revision = 1;
  private compactRevision = 0;
  private nextLeaseId: bigint;
  private readonly watchers = new Map<
    string,
    { key: string; end: string; prevKv: boolean; emit: (events: HistoryEvent[], revision: number) => void }
  >();
  private nextWatchId = 0;
  private readonly ended = new Set<string>();
  private raftTerm = 2;

  /**
   * @param clusterId etcd's cluster ID (decimal); a restore onto a new cluster gives a new one.
   * @param memberIds the members' IDs, one per endpoint.
   */
  constructor(
    public clusterId: string,
    readonly memberIds: readonly string[],
    private readonly time: ModelTime = globalTime,
    leaseIdBase = 7_587_000_000_000_000_000n,
  ) {
    this.nextLeaseId = leaseIdBase;
  }

  header(member = 0): WireHeader {
    return {
      cluster_id: this.clusterId,
      member_id: this.memberIds[member] ?? this.memberIds[0] ?? '1',
      revision: String(this.revision),
      raft_term: String(this.raftTerm),
    };
  }

  get currentRevision(): number {
    return this.revision;
  }

  // ---- KV ------------------------------------------------------------------------------------------------------

  range(req: Payload, member = 0): Payload {
    const key = bin(req['key']);
    const end = bin(req['range_end']);
    const atRev = num(req['revision']);
    // etcd refuses a read below the compacted revision; at it, the state is still there.
    if (atRev > 0 && atRev < this.compactRevision) throw compacted();
    if (atRev > this.revision) throw futureRev();
    let found = this.rangeAt(key, end, atRev > 0 ? atRev : this.revision);
    found.sort((a, b) => (bin(a.key) < bin(b.key) ? -1 : bin(a.key) > bin(b.key) ? 1 : 0));
    if (num(req['sort_order']) === 2) found.reverse();
    const count = found.length;
    const limit = num(req['limit']);
    const more = limit > 0 && found.length > limit;
    if (limit > 0) found = found.slice(0, limit);
    const countOnly = req['count_only'] === true;
    return {
      header: this.header(member),
      kvs: countOnly ? [] : found.map((kv) => wireKv(kv, req['keys_only'] === true)),
      more,
      count: String(count),
    };
  }

  private rangeAt(key: string, end: string, rev: number): Kv[] {
    if (rev === this.revision) return [...this.kvs.entries()].filter(([k]) => inRange(k, key, end)).map(([, v]) => v);
    // A past revision: the live state rewound by the history after `rev`.
    const state = new Map(this.kvs);
    for (let i = this.history.length - 1; i >= 0; i--) {
      const e = this.history[i] as HistoryEvent;
      if (e.revision <= rev) break;
      const k = bin(e.kv.key);
      if (e.prev === undefined) state.delete(k);
      else state.set(k, e.prev);
    }
    return [...state.entries()].filter(([k]) => inRange(k, key, end)).map(([, v]) => v);
  }

  put(req: Payload, member = 0): Payload {
    const pending: HistoryEvent[] = [];
    this.checkPut(req);
    const prev = this.applyPut(req, this.revision + 1, pending);
    this.commit(pending);
    return {
      header: this.header(member),
      prev_kv: req['prev_kv'] === true && prev !== undefined ? wireKv(prev) : null,
    };
  }

  deleteRange(req: Payload, member = 0): Payload {
    const pending: HistoryEvent[] = [];
    const prevs = this.applyDelete(req, this.revision + 1, pending);
    this.commit(pending);
    return {
      header: this.header(member),
      deleted: String(prevs.length),
      prev_kvs: req['prev_kv'] === true ? prevs.map((p) => wireKv(p)) : [],
    };
  }

  txn(req: Payload, member = 0): Payload {
    const compares = (req['compare'] as Payload[] | undefined) ?? [];
    const succeeded = compares.every((c) => this.compare(c));
    const ops = ((succeeded ? req['success'] : req['failure']) as Payload[] | undefined) ?? [];
    for (const op of ops) if (op['request_put'] !== undefined) this.checkPut(op['request_put'] as Payload);
    const pending: HistoryEvent[] = [];
    const rev = this.revision + 1;
    const responses: Payload[] = [];
    for (const op of ops) {
      if (op['request_range'] !== undefined) {
        // Reads inside a write txn see the writes before them (etcd applies the ops in order).
        const r = op['request_range'] as Payload;
        const saved = this.revision;
        const found = [...this.kvs.entries()]
          .filter(([k]) => inRange(k, bin(r['key']), bin(r['range_end'])))
          .map(([, v]) => v)
          .sort((a, b) => (bin(a.key) < bin(b.key) ? -1 : 1));
        this.revision = saved;
        responses.push({
          response: 'response_range',
          response_range: {
            header: this.header(member),
            kvs: found.map((kv) => wireKv(kv)),
            more: false,
            count: String(found.length),
          },
        });
      } else if (op['request_put'] !== undefined) {
        const p = op['request_put'] as Payload;
        const prev = this.applyPut(p, rev, pending);
        responses.push({
          response: 'response_put',
          response_put: {
            header: this.header(member),
            prev_kv: p['prev_kv'] === true && prev !== undefined ? wireKv(prev) : null,
          },
        });
      } else if (op['request_delete_range'] !== undefined) {
        const d = op['request_delete_range'] as Payload;
        const prevs = this.applyDelete(d, rev, pending);
        responses.push({
          response: 'response_delete_range',
          response_delete_range: {
            header: this.header(member),
            deleted: String(prevs.length),
            prev_kvs: d['prev_kv'] === true ? prevs.map((x) => wireKv(x)) : [],
          },
        });
      } else throw new GRPCInvalidArgumentError('the model supports range, put and delete ops in a txn');
    }
    this.commit(pending);
    const header = this.header(member);
    // Every op's header carries the txn's revision, as etcd's does.
    for (const r of responses)
      ((r[r['response'] as string] as Payload)['header'] as WireHeader).revision = header.revision;
    return { header, succeeded, responses };
  }

  compact(req: Payload, member = 0): Payload {
    const rev = num(req['revision']);
    if (rev <= this.compactRevision) throw compacted();
    if (rev > this.revision) throw futureRev();
    this.compactRevision = rev;
    this.history = this.history.filter((e) => e.revision >= rev);
    return { header: this.header(member) };
  }

  private compare(c: Payload): boolean {
    const kv = this.kvs.get(bin(c['key']));
    const target = compareTarget(c['target']);
    if (kv === undefined && target === 'VALUE') return false;
    const k = kv ?? ZERO_KV;
    let cmp: number;
    switch (target) {
      case 'VERSION':
        cmp = Math.sign(k.version - num(c['version']));
        break;
      case 'CREATE':
        cmp = Math.sign(k.createRevision - num(c['create_revision']));
        break;
      case 'MOD':
        cmp = Math.sign(k.modRevision - num(c['mod_revision']));
        break;
      case 'LEASE': {
        const a = BigInt(k.lease);
        const b = BigInt(String(c['lease'] ?? '0'));
        cmp = a < b ? -1 : a > b ? 1 : 0;
        break;
      }
      case 'VALUE':
        cmp = Buffer.compare(k.value, Buffer.from(bin(c['value']), 'latin1'));
        break;
    }
    switch (compareResult(c['result'])) {
      case 'EQUAL':
        return cmp === 0;
      case 'GREATER':
        return cmp > 0;
      case 'LESS':
        return cmp < 0;
      case 'NOT_EQUAL':
        return cmp !== 0;
    }
  }

  private checkPut(req: Payload): void {
    const lease = String(req['lease'] ?? '0');
    if (lease !== '0' && !this.leases.has(lease)) throw leaseNotFound();
  }

  private applyPut(req: Payload, rev: number, pending: HistoryEvent[]): Kv | undefined {
    const k = bin(req['key']);
    const prev = this.kvs.get(k);
    const lease = String(req['lease'] ?? '0');
    const kv: Kv = {
      key: Buffer.from(k, 'latin1'),
      value: req['ignore_value'] === true && prev !== undefined ? prev.value : Buffer.from(bin(req['value']), 'latin1'),
      createRevision: prev?.createRevision ?? rev,
      modRevision: rev,
      version: (prev?.version ?? 0) + 1,
      lease: req['ignore_lease'] === true && prev !== undefined ? prev.lease : lease,
    };
    if (prev !== undefined && prev.lease !== '0') this.leases.get(prev.lease)?.keys.delete(k);
    if (kv.lease !== '0') this.leases.get(kv.lease)?.keys.add(k);
    this.kvs.set(k, kv);
    pending.push({ revision: rev, type: 'PUT', kv, prev });
    return prev;
  }

  private applyDelete(req: Payload, rev: number, pending: HistoryEvent[]): Kv[] {
    const key = bin(req['key']);
    const end = bin(req['range_end']);
    const gone = [...this.kvs.entries()].filter(([k]) => inRange(k, key, end)).sort(([a], [b]) => (a < b ? -1 : 1));
    for (const [k, prev] of gone) this.deleteKey(k, prev, rev, pending);
    return gone.map(([, v]) => v);
  }

  private deleteKey(k: string, prev: Kv, rev: number, pending: HistoryEvent[]): void {
    this.kvs.delete(k);
    if (prev.lease !== '0') this.leases.get(prev.lease)?.keys.delete(k);
    pending.push({
      revision: rev,
      type: 'DELETE',
      kv: { ...ZERO_KV, key: prev.key, modRevision: rev },
      prev,
    });
  }

  /** Ends a write: the revision moves by one when anything changed, and watchers hear of it. */
  private commit(pending: HistoryEvent[]): void {
    if (pending.length === 0) return;
    this.revision += 1;
    this.history.push(...pending);
    for (const w of this.watchers.values()) {
      const mine = pending.filter((e) => inRange(bin(e.kv.key), w.key, w.end));
      if (mine.length > 0) w.emit(mine, this.revision);
    }
  }

  // ---- Leases ----------------------------------------------------------------------------------------------------

  leaseGrant(req: Payload, member = 0): Payload {
    const ttl = Math.max(num(req['TTL']), MIN_LEASE_TTL_SECONDS);
    let id = String(req['ID'] ?? '0');
    if (id === '0') {
      this.nextLeaseId += 1n;
      id = String(this.nextLeaseId);
    } else if (this.leases.has(id)) throw new GRPCInvalidArgumentError('etcdserver: lease already exists');
    const l: ModelLease = { id, grantedTtl: ttl, expiresAt: 0, keys: new Set(), timer: undefined };
    this.leases.set(id, l);
    this.renew(l);
    return { header: this.header(member), ID: id, TTL: String(ttl), error: '' };
  }

  private renew(l: ModelLease): void {
    if (l.timer !== undefined) this.time.clearTimer(l.timer);
    l.expiresAt = this.time.now() + l.grantedTtl * 1000;
    l.timer = this.time.setTimer(l.grantedTtl * 1000, () => this.expire(l));
  }

  private expire(l: ModelLease): void {
    if (this.leases.get(l.id) !== l) return;
    if (this.time.now() < l.expiresAt) {
      l.timer = this.time.setTimer(l.expiresAt - this.time.now(), () => this.expire(l));
      return;
    }
    this.revoke(l);
  }

  private revoke(l: ModelLease): void {
    if (l.timer !== undefined) this.time.clearTimer(l.timer);
    this.leases.delete(l.id);
    this.ended.add(l.id);
    const pending: HistoryEvent[] = [];
    const rev = this.revision + 1;
    for (const k of [...l.keys].sort()) {
      const prev = this.kvs.get(k);
      if (prev !== undefined) this.deleteKey(k, prev, rev, pending);
    }
    this.commit(pending);
  }

  /** Whether lease `id` is alive (granted, neither expired nor revoked). */
  hasLease(id: string): boolean {
    return this.leases.has(id);
  }

  /**
   * Whether lease `id` ended by expiry or revocation in this cluster's history (not one a restore took away, which
   * the holder cannot know of: docs/design.md §5 covers that case with the start hold and the rewind check).
   */
  leaseEnded(id: string): boolean {
    return this.ended.has(id);
  }

  leaseRevoke(req: Payload, member = 0): Payload {
    const l = this.leases.get(String(req['ID']));
    if (l === undefined) throw leaseNotFound();
    this.revoke(l);
    return { header: this.header(member) };
  }

  /** One keep-alive: the answer a `LeaseKeepAlive` stream sends for `{ ID }` (TTL 0: no such lease). */
  leaseKeepAlive(req: Payload, member = 0): Payload {
    const id = String(req['ID']);
    const l = this.leases.get(id);
    if (l === undefined) return { header: this.header(member), ID: id, TTL: '0' };
    this.renew(l);
    return { header: this.header(member), ID: id, TTL: String(l.grantedTtl) };
  }

  leaseTimeToLive(req: Payload, member = 0): Payload {
    const id = String(req['ID']);
    const l = this.leases.get(id);
    if (l === undefined) return { header: this.header(member), ID: id, TTL: '-1', grantedTTL: '0', keys: [] };
    const left = Math.max(0, Math.floor((l.expiresAt - this.time.now()) / 1000));
    return {
      header: this.header(member),
      ID: id,
      TTL: String(left),
      grantedTTL: String(l.grantedTtl),
      keys: req['keys'] === true ? [...l.keys].sort().map((k) => Buffer.from(k, 'latin1')) : [],
    };
  }

  leaseLeases(_req: Payload, member = 0): Payload {
    return { header: this.header(member), leases: [...this.leases.keys()].map((ID) => ({ ID })) };
  }

  // ---- Watch ---------------------------------------------------------------------------------------------------

  /**
   * A watch on [key, rangeEnd) from `startRevision` (0: from now). `emit` gets each committed revision's events;
   * `compacted` is called instead when the start revision is compacted away.
   */
  watch(
    req: Payload,
    emit: (events: WireEvent[], revision: number) => void,
    compactedAt: (compactRevision: number) => void,
  ): ModelWatch | undefined {
    const key = bin(req['key']);
    const end = bin(req['range_end']);
    const start = num(req['start_revision']);
    const prevKv = req['prev_kv'] === true;
    const filters = ((req['filters'] as unknown[] | undefined) ?? []).map((f) =>
      f === 0 || f === 'NOPUT' ? 'PUT' : 'DELETE',
    );
    const toWire = (es: HistoryEvent[]): WireEvent[] =>
      es
        .filter((e) => !filters.includes(e.type))
        .map((e) => ({
          type: e.type === 'PUT' ? ('Put' as const) : ('Delete' as const),
          kv: wireKv(e.kv),
          prev_kv: prevKv && e.prev !== undefined ? wireKv(e.prev) : null,
        }));
    if (start > 0 && start < this.compactRevision) {
      compactedAt(this.compactRevision);
      return undefined;
    }
    const id = String(this.nextWatchId++);
    const w = {
      key,
      end,
      prevKv,
      emit: (es: HistoryEvent[], rev: number) => {
        const wire = toWire(es);
        if (wire.length > 0) emit(wire, rev);
      },
    };
    this.watchers.set(id, w);
    if (start > 0) {
      // Replay the history from `start`, one response per revision (etcd may batch them; the events are the same).
      const past = this.history.filter((e) => e.revision >= start && inRange(bin(e.kv.key), key, end));
      const byRev = new Map<number, HistoryEvent[]>();
      for (const e of past) byRev.set(e.revision, [...(byRev.get(e.revision) ?? []), e]);
      for (const [rev, es] of byRev) w.emit(es, rev);
    }
    return { id, cancel: () => this.watchers.delete(id) };
  }

  /** Drops every watcher (a restart of the members: their streams end). */
  dropWatchers(): void {
    this.watchers.clear();
  }

  // ---- Maintenance, cluster, snapshot -------------------------------------------------------------------------------

  status(member = 0): Payload {
    return {
      header: this.header(member),
      version: '3.5.0-sim',
      dbSize: String(1000 + this.kvs.size * 100),
      leader: this.memberIds[0] ?? '1',
      raftIndex: String(this.revision + 10),
      raftTerm: String(this.raftTerm),
      raftAppliedIndex: String(this.revision + 10),
      errors: [],
      dbSizeInUse: String(1000 + this.kvs.size * 100),
      isLearner: false,
    };
  }

  memberList(member = 0, clientUrls: readonly string[] = []): Payload {
    return {
      header: this.header(member),
      members: this.memberIds.map((ID, i) => ({
        ID,
        name: `m${i}`,
        peerURLs: [],
        clientURLs: clientUrls[i] === undefined ? [] : [clientUrls[i]],
        isLearner: false,
      })),
    };
  }

  /** `etcdctl snapshot save`: the key space, its revisions and leases now. */
  snapshot(): ModelSnapshot {
    return {
      revision: this.revision,
      compactRevision: this.compactRevision,
      kvs: [...this.kvs.values()],
      leases: [...this.leases.values()].map((l) => ({ id: l.id, grantedTtl: l.grantedTtl, keys: [...l.keys] })),
      history: [...this.history],
    };
  }

  /**
   * `etcdutl snapshot restore` and a restart: the key space goes back to the snapshot; every lease in it starts a
   * full TTL again (etcd's lessor promotes restored leases with fresh expiries); watch streams end; a new cluster ID
   * when the restore used another token or other peer URLs.
   */
  restore(s: ModelSnapshot, newClusterId?: string): void {
    for (const l of this.leases.values()) if (l.timer !== undefined) this.time.clearTimer(l.timer);
    this.kvs = new Map(s.kvs.map((kv) => [bin(kv.key), kv]));
    this.revision = s.revision;
    this.compactRevision = s.compactRevision;
    this.history = [...s.history];
    this.leases = new Map();
    for (const l of s.leases) {
      const m: ModelLease = {
        id: l.id,
        grantedTtl: l.grantedTtl,
        expiresAt: 0,
        keys: new Set(l.keys),
        timer: undefined,
      };
      this.leases.set(l.id, m);
      this.renew(m);
    }
    this.watchers.clear();
    this.raftTerm += 1;
    if (newClusterId !== undefined) this.clusterId = newClusterId;
  }

  /** Stops every lease timer (the end of a run). */
  close(): void {
    for (const l of this.leases.values()) if (l.timer !== undefined) this.time.clearTimer(l.timer);
    this.watchers.clear();
  }
}

/** A watch event on the wire. */
export interface WireEvent {
  /** As etcd3's proto loader names the enum (`enums: String`). */
  type: 'Put' | 'Delete';
  kv: WireKv;
  prev_kv: WireKv | null;
}

function compareTarget(t: unknown): 'VERSION' | 'CREATE' | 'MOD' | 'VALUE' | 'LEASE' {
  const names = ['VERSION', 'CREATE', 'MOD', 'VALUE', 'LEASE'] as const;
  if (typeof t === 'number') return names[t] ?? 'VERSION';
  const s = String(t).toUpperCase();
  return (names as readonly string[]).includes(s) ? (s as (typeof names)[number]) : 'VERSION';
}

function compareResult(r: unknown): 'EQUAL' | 'GREATER' | 'LESS' | 'NOT_EQUAL' {
  const names = ['EQUAL', 'GREATER', 'LESS', 'NOT_EQUAL'] as const;
  if (typeof r === 'number') return names[r] ?? 'EQUAL';
  const s = String(r).toUpperCase();
  return (names as readonly string[]).includes(s) ? (s as (typeof names)[number]) : 'EQUAL';
}

function leaseNotFound(): Error {
  return new EtcdLeaseInvalidError('etcdserver: requested lease not found');
}

function compacted(): Error {
  return new GRPCOutOfRangeError('etcdserver: mvcc: required revision has been compacted');
}

function futureRev(): Error {
  return new GRPCOutOfRangeError('etcdserver: mvcc: required revision is a future revision');
}
