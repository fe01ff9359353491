import { Duplex } from 'node:stream';
import { GRPCDeadlineExceededError, GRPCUnavailableError } from 'etcd3';
import { ConnectionPool } from 'etcd3/lib/connection-pool';
import type { EtcdModel, WireEvent } from './etcd-model.js';

/**
 * The seam: etcd's v3 API as `etcd3`'s `ICallable` (its `ConnectionPool.exec` for unary calls and `withConnection`
 * for streams), answered by {@link EtcdModel}s instead of gRPC. Every `etcd3` client in the process whose hosts are
 * simulated endpoints (`<process>--<cluster>-m<member>:2379`) is routed here, so the real lease, registry, binding,
 * restore and operator code, and etcd3's own builders and watch manager, run unchanged. The endpoint names the calling
 * process, which is what lets a partition cut one process off one member.
 *
 * This is what etcd3's public `client.mock(callable)` does, applied to every pool by prototype because the lease
 * creates its clients itself; unlike `mock`, the call's deadline is passed on and honoured.
 */

/**
 * How a process reaches a member: answers, refused (down), cut off, or slow. A request sent into a cut link is held,
 * as a live TCP connection holds it, and reaches the member when the link heals (most of the time: the caller's cancel
 * may get there first), unless the member's process ended meanwhile; its answer comes too late for the caller.
 */
export type LinkState =
  | { readonly kind: 'ok' }
  | { readonly kind: 'down' }
  | { readonly kind: 'cut' }
  | { readonly kind: 'slow'; readonly ms: number };

interface Cluster {
  readonly model: EtcdModel;
  readonly members: number;
  readonly streams: Set<SimStream>;
}

type Payload = Record<string, unknown>;

/** Seeded randomness the network draws its delays and lost answers from. */
export interface NetRandom {
  /** An integer in [0, n). */
  int(n: number): number;
}

/** The simulated network between processes and etcd members. */
export class SimNet {
  private readonly clusters = new Map<string, Cluster>();
  private readonly links = new Map<string, LinkState>();
  private readonly down = new Set<string>();
  private readonly paused = new Map<string, (() => void)[]>();
  /** Processes whose next write is applied and its answer lost (one-shot each). */
  private readonly loseNextAnswer = new Set<string>();
  /** Each member's process, counted up when it ends (down, or its cluster restored): what a held request was sent to. */
  private readonly incarnations = new Map<string, number>();
  /** Requests held in cut links, woken to look again whenever a link or a member changes. */
  private readonly held = new Set<() => void>();
  /** Requests held in a cut link that reached the member when it healed (a count for the report). */
  lateDeliveries = 0;
  /** Probability in 1/1000 that any answer is lost after the request was applied. */
  lostAnswerPerMille = 0;
  /** Writes applied whose answer was lost (a count for the report). */
  lostAnswers = 0;
  /** Errors client handlers threw on stream messages (see SimStream). */
  readonly clientErrors: unknown[] = [];

  constructor(private readonly random: NetRandom) {}

  addCluster(name: string, model: EtcdModel, members: number): void {
    this.clusters.set(name, { model, members, streams: new Set() });
  }

  /** The endpoint URLs process `proc` uses for cluster `name`. */
  endpoints(proc: string, name: string): string[] {
    const c = this.cluster(name);
    return Array.from({ length: c.members }, (_, i) => `http://${proc}--${name}-m${i}:2379`);
  }

  model(name: string): EtcdModel {
    return this.cluster(name).model;
  }

  private cluster(name: string): Cluster {
    const c = this.clusters.get(name);
    if (c === undefined) throw new Error(`no simulated etcd cluster ${name}`);
    return c;
  }

  /** Sets how `proc` reaches `cluster`'s member `member` (every member when omitted). */
  setLink(proc: string, cluster: string, state: LinkState, member?: number): void {
    const members = member === undefined ? [...Array(this.cluster(cluster).members).keys()] : [member];
    for (const m of members) this.links.set(`${proc}|${cluster}|${m}`, state);
    if (state.kind === 'down')
      this.failStreams((s) => s.proc === proc && s.cluster === cluster && members.includes(s.member));
    this.wakeHeld();
  }

  /** A member stops (or starts again): every process gets refused, its streams end. */
  setMemberDown(cluster: string, member: number, isDown: boolean): void {
    const k = `${cluster}|${member}`;
    if (isDown) {
      this.down.add(k);
      this.incarnations.set(k, (this.incarnations.get(k) ?? 0) + 1);
      this.failStreams((s) => s.cluster === cluster && s.member === member);
    } else this.down.delete(k);
    this.wakeHeld();
  }

  /** The cluster restarted (a restore): every stream on it ends, as the members' processes did. */
  restarted(cluster: string): void {
    for (let m = 0; m < this.cluster(cluster).members; m++) {
      const k = `${cluster}|${m}`;
      this.incarnations.set(k, (this.incarnations.get(k) ?? 0) + 1);
    }
    this.failStreams((s) => s.cluster === cluster);
    this.wakeHeld();
  }

  private wakeHeld(): void {
    const held = [...this.held];
    this.held.clear();
    for (const f of held) f();
  }

  /**
   * Holds a request sent into a cut link until the link heals; whether it then reaches the member: not when the
   * member's process ended meanwhile (the connection went with it), and not one time in four (the caller's cancel,
   * sent after it on the same connection, got there first; the lease's and the library's calls all have deadlines).
   */
  private async heldUntilHealed(r: { proc: string; cluster: string; member: number }): Promise<boolean> {
    const k = `${r.cluster}|${r.member}`;
    const sentTo = this.incarnations.get(k) ?? 0;
    while (this.link(r.proc, r.cluster, r.member).kind === 'cut') await new Promise<void>((w) => this.held.add(w));
    if (this.link(r.proc, r.cluster, r.member).kind === 'down' || (this.incarnations.get(k) ?? 0) !== sentTo)
      return false;
    if (this.random.int(4) === 0) return false;
    this.lateDeliveries++;
    return true;
  }

  pause(proc: string): void {
    if (!this.paused.has(proc)) this.paused.set(proc, []);
  }

  resume(proc: string): void {
    const held = this.paused.get(proc);
    this.paused.delete(proc);
    for (const f of held ?? []) f();
  }

  isPaused(proc: string): boolean {
    return this.paused.has(proc);
  }

  /** The next write `proc` sends is applied by etcd and its answer lost. */
  loseNextWriteAnswer(proc: string): void {
    this.loseNextAnswer.add(proc);
  }

  private link(proc: string, cluster: string, member: number): LinkState {
    if (this.down.has(`${cluster}|${member}`)) return { kind: 'down' };
    return this.links.get(`${proc}|${cluster}|${member}`) ?? { kind: 'ok' };
  }

  private failStreams(which: (s: SimStream) => boolean): void {
    for (const c of this.clusters.values())
      for (const s of [...c.streams])
        if (which(s)) s.fail(new GRPCUnavailableError('14 UNAVAILABLE: Connection dropped'));
  }

  /** Parses `<proc>--<cluster>-m<member>:port`. */
  parseHost(host: string): { proc: string; cluster: string; member: number } | undefined {
    const m = /^(?:https?:\/\/)?(.+)--(.+)-m([0-9]+)(?::[0-9]+)?$/.exec(host);
    if (m === null) return undefined;
    return { proc: m[1] as string, cluster: m[2] as string, member: Number(m[3]) };
  }

  /** Waits while `proc` is paused, then a network delay (`extra` more for a slow link). */
  private async hop(proc: string, extra = 0): Promise<void> {
    const held = this.paused.get(proc);
    if (held !== undefined) await new Promise<void>((r) => held.push(r));
    await new Promise((r) => setTimeout(r, this.random.int(3) + extra));
    const again = this.paused.get(proc);
    if (again !== undefined) await new Promise<void>((r) => again.push(r));
  }

  /** A unary call from a pool whose hosts are `hosts`. */
  async exec(
    hosts: readonly string[],
    service: string,
    method: string,
    payload: Payload,
    deadline: Date | undefined,
  ): Promise<unknown> {
    const routes = hosts.map((h) => this.parseHost(h)).filter((r) => r !== undefined);
    if (routes.length === 0) throw new Error(`not a simulated endpoint: ${hosts.join(',')}`);
    const start = this.random.int(routes.length);
    const call = (async () => {
      for (let i = 0; i < routes.length; i++) {
        const r = routes[(start + i) % routes.length] as { proc: string; cluster: string; member: number };
        const link = this.link(r.proc, r.cluster, r.member);
        await this.hop(r.proc);
        if (link.kind === 'down') continue;
        if (link.kind === 'slow') await new Promise((res) => setTimeout(res, link.ms));
        // The member may have gone down or been cut while the request travelled; a cut holds it.
        const now = this.link(r.proc, r.cluster, r.member);
        if (now.kind === 'down') continue;
        if ((link.kind === 'cut' || now.kind === 'cut') && !(await this.heldUntilHealed(r)))
          return new Promise<never>(() => undefined);
        const answer = this.apply(this.cluster(r.cluster), r.member, service, method, payload);
        const isWrite =
          method !== 'range' && method !== 'status' && method !== 'memberList' && method !== 'leaseTimeToLive';
        // The operator's answers are not lost at random (a lost answer there is the operator's retry, not the
        // deployment's fault); a node's are.
        const randomLoss = r.proc !== 'op' && this.random.int(1000) < this.lostAnswerPerMille;
        if (isWrite && (this.loseNextAnswer.delete(r.proc) || randomLoss)) {
          this.lostAnswers++;
          // Applied, and the answer lost: either the call hangs to its deadline, or the connection resets (a
          // recoverable error, which a retrying client policy re-sends: the orphan claim of the first review).
          if (this.random.int(2) === 0) return new Promise<never>(() => undefined);
          await this.hop(r.proc);
          throw new GRPCUnavailableError('14 UNAVAILABLE: Connection reset after the request was sent');
        }
        await this.hop(r.proc);
        return answer();
      }
      throw new GRPCUnavailableError('14 UNAVAILABLE: No connection established (every member refused)');
    })();
    if (deadline === undefined) return call;
    return deadlineRace(call, deadline);
  }

  /** Applies a call to the model now; the returned function yields its answer (or throws its error) later. */
  private apply(c: Cluster, member: number, service: string, method: string, payload: Payload): () => unknown {
    try {
      const m = c.model;
      let out: unknown;
      switch (`${service}.${method}`) {
        case 'KV.range':
          out = m.range(payload, member);
          break;
        case 'KV.put':
          out = m.put(payload, member);
          break;
        case 'KV.deleteRange':
          out = m.deleteRange(payload, member);
          break;
        case 'KV.txn':
          out = m.txn(payload, member);
          break;
        case 'KV.compact':
          out = m.compact(payload, member);
          break;
        case 'Lease.leaseGrant':
          out = m.leaseGrant(payload, member);
          break;
        case 'Lease.leaseRevoke':
          out = m.leaseRevoke(payload, member);
          break;
        case 'Lease.leaseTimeToLive':
          out = m.leaseTimeToLive(payload, member);
          break;
        case 'Lease.leaseLeases':
          out = m.leaseLeases(payload, member);
          break;
        case 'Maintenance.status':
          out = m.status(member);
          break;
        case 'Cluster.memberList':
          out = m.memberList(member);
          break;
        default:
          throw new Error(`the simulated etcd does not answer ${service}.${method}`);
      }
      return () => out;
    } catch (e) {
      return () => {
        throw e;
      };
    }
  }

  /** Opens a stream (Watch or LeaseKeepAlive) from a pool whose hosts are `hosts`. */
  openStream(hosts: readonly string[], service: string, deadline: Date | undefined): SimStream {
    const routes = hosts.map((h) => this.parseHost(h)).filter((r) => r !== undefined);
    if (routes.length === 0) throw new Error(`not a simulated endpoint: ${hosts.join(',')}`);
    const up = routes.filter((r) => this.link(r.proc, r.cluster, r.member).kind !== 'down');
    const r = (up.length > 0 ? up : routes)[this.random.int(up.length > 0 ? up.length : routes.length)] as {
      proc: string;
      cluster: string;
      member: number;
    };
    const c = this.cluster(r.cluster);
    const s = new SimStream(this, c, r.proc, r.cluster, r.member, service);
    c.streams.add(s);
    if (up.length === 0)
      setTimeout(() => s.fail(new GRPCUnavailableError('14 UNAVAILABLE: No connection established')), 0);
    if (deadline !== undefined) {
      const t = setTimeout(
        () => s.fail(new GRPCDeadlineExceededError('4 DEADLINE_EXCEEDED: Deadline exceeded')),
        Math.max(0, deadline.getTime() - Date.now()),
      );
      s.once('close', () => clearTimeout(t));
    }
    return s;
  }

  /** Whether a message on `s` may travel now (delivered in order once the link heals and the process runs). */
  canDeliver(s: SimStream): boolean {
    const l = this.link(s.proc, s.cluster, s.member);
    return l.kind !== 'cut' && !this.paused.has(s.proc);
  }

  /** Unregisters an ended stream. */
  closed(s: SimStream, c: { streams: Set<SimStream> }): void {
    c.streams.delete(s);
  }

  delay(): number {
    return this.random.int(3);
  }
}

function deadlineRace<T>(p: Promise<T>, deadline: Date): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(
      () => reject(new GRPCDeadlineExceededError('4 DEADLINE_EXCEEDED: Deadline exceeded')),
      Math.max(0, deadline.getTime() - Date.now()),
    );
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

/** A bidirectional stream shaped like grpc-js's `ClientDuplexStream` as etcd3 uses it (`write`, `end`, `cancel`). */
export class SimStream extends Duplex {
  private readonly watches = new Map<string, { cancel(): void }>();
  private outbox: { at: number; msg: unknown }[] = [];
  private inbox: Payload[] = [];
  private pumping = false;
  private done = false;

  constructor(
    private readonly net: SimNet,
    private readonly c: { model: EtcdModel; streams: Set<SimStream> },
    readonly proc: string,
    readonly cluster: string,
    readonly member: number,
    private readonly service: string,
  ) {
    super({ objectMode: true });
  }

  override _read(): void {
    // Messages are pushed as they are delivered.
  }

  override _write(chunk: Payload, _enc: BufferEncoding, cb: (e?: Error | null) => void): void {
    this.inbox.push(chunk);
    this.pump();
    cb();
  }

  override _final(cb: (e?: Error | null) => void): void {
    cb();
    this.finish();
  }

  /** grpc-js's client-side cancel: the stream ends, quietly. */
  cancel(): void {
    this.finish();
  }

  /** The connection failed: an error, then the stream is gone. */
  fail(e: Error): void {
    if (this.done) return;
    this.finish();
    this.emit('error', e);
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    for (const w of this.watches.values()) w.cancel();
    this.watches.clear();
    this.net.closed(this, this.c);
    this.emit('close');
  }

  /** Moves requests to the model and answers back, in order, while the link lets them through. */
  private pump(): void {
    if (this.pumping || this.done) return;
    this.pumping = true;
    setTimeout(() => {
      this.pumping = false;
      if (this.done) return;
      if (!this.net.canDeliver(this)) {
        this.retryLater();
        return;
      }
      for (const req of this.inbox.splice(0)) this.handle(req);
      const now = Date.now();
      const due = this.outbox.filter((o) => o.at <= now);
      this.outbox = this.outbox.filter((o) => o.at > now);
      for (const o of due) {
        try {
          this.push(o.msg);
        } catch (e) {
          // A client handler threw on a message (etcd3's watch manager throws on an event for a watcher it already
          // dropped: an event that crossed a cancel). Over gRPC that error would surface in the stream's callback;
          // here it is counted, not allowed to end the run.
          this.net.clientErrors.push(e);
        }
      }
      if (this.outbox.length > 0) this.retryLater();
    }, this.net.delay());
  }

  private retryLater(): void {
    if (this.pumping) return;
    this.pumping = true;
    setTimeout(() => {
      this.pumping = false;
      this.pump();
    }, 5);
  }

  private send(msg: unknown): void {
    this.outbox.push({ at: Date.now(), msg });
    this.pump();
  }

  private handle(req: Payload): void {
    const m = this.c.model;
    if (this.service === 'Lease') {
      this.send(m.leaseKeepAlive(req, this.member));
      return;
    }
    const create = req['create_request'] as Payload | undefined;
    const cancel = req['cancel_request'] as Payload | undefined;
    if (create !== undefined) {
      let watchId = '';
      const pendingEvents: { events: WireEvent[]; rev: number }[] = [];
      let created = false;
      const deliver = (events: WireEvent[], rev: number): void => {
        if (!created) {
          pendingEvents.push({ events, rev });
          return;
        }
        this.send({
          header: { ...m.header(this.member), revision: String(rev) },
          watch_id: watchId,
          created: false,
          canceled: false,
          compact_revision: '0',
          cancel_reason: '',
          fragment: false,
          events,
        });
      };
      const w = m.watch(create, deliver, (compactRevision) => {
        this.send({
          header: m.header(this.member),
          watch_id: '-1',
          created: true,
          canceled: true,
          compact_revision: String(compactRevision),
          cancel_reason: 'compacted',
          fragment: false,
          events: [],
        });
      });
      if (w === undefined) return;
      watchId = w.id;
      this.watches.set(w.id, w);
      this.send({
        header: m.header(this.member),
        watch_id: watchId,
        created: true,
        canceled: false,
        compact_revision: '0',
        cancel_reason: '',
        fragment: false,
        events: [],
      });
      created = true;
      for (const p of pendingEvents) deliver(p.events, p.rev);
    } else if (cancel !== undefined) {
      const id = String(cancel['watch_id']);
      this.watches.get(id)?.cancel();
      this.watches.delete(id);
      this.send({
        header: m.header(this.member),
        watch_id: id,
        created: false,
        canceled: true,
        compact_revision: '0',
        cancel_reason: '',
        fragment: false,
        events: [],
      });
    }
  }
}

let installed: SimNet | undefined;

/**
 * Routes every `etcd3` client of this process to `net` (by prototype, see the file's comment). Returns the uninstall.
 * Only one net at a time.
 */
export function installSimNet(net: SimNet): () => void {
  if (installed !== undefined) throw new Error('a simulated network is already installed');
  installed = net;
  type Pool = {
    options: { hosts?: string | string[]; defaultCallOptions?: unknown };
    callOptionsFactory?: unknown;
    globalPolicy: { execute<T>(fn: () => Promise<T>): Promise<T> };
  };
  const proto = ConnectionPool.prototype as unknown as Record<string, unknown>;
  const saved = { exec: proto['exec'], withConnection: proto['withConnection'], markFailed: proto['markFailed'] };
  const hostsOf = (p: Pool): string[] => {
    const h = p.options.hosts ?? [];
    return typeof h === 'string' ? [h] : [...h];
  };
  const resolve = (p: Pool, options: unknown, ctx: Payload): { deadline?: Date | number } | undefined => {
    if (options !== undefined && options !== null) return options as { deadline?: Date };
    const f = p.callOptionsFactory;
    if (typeof f === 'function') return (f as (c: Payload) => { deadline?: Date })(ctx);
    return f as { deadline?: Date } | undefined;
  };
  const asDate = (d: Date | number | undefined): Date | undefined =>
    d === undefined ? undefined : d instanceof Date ? d : new Date(d);
  const simulated = (p: Pool): boolean => hostsOf(p).some((h) => net.parseHost(h) !== undefined);
  type Fn = (this: unknown, ...args: unknown[]) => unknown;
  proto['exec'] = function (this: Pool, service: string, method: string, payload: Payload, options?: unknown) {
    if (!simulated(this)) return (saved.exec as Fn).call(this, service, method, payload, options);
    const o = resolve(this, options, { service, method, params: payload, isStream: false });
    // Through the client's own global policy, as etcd3 does: a policy that re-sends a call re-sends it here too.
    return this.globalPolicy.execute(() => net.exec(hostsOf(this), service, method, payload, asDate(o?.deadline)));
  };
  proto['withConnection'] = async function (
    this: Pool,
    service: string,
    fn: (a: Payload) => unknown,
    ...rest: unknown[]
  ) {
    if (!simulated(this)) return (saved.withConnection as Fn).call(this, service, fn, ...rest);
    const hosts = hostsOf(this);
    const client = {
      watch: (_meta: unknown, opts?: { deadline?: Date | number }) =>
        net.openStream(hosts, 'Watch', asDate(opts?.deadline)),
      leaseKeepAlive: (_meta: unknown, opts?: { deadline?: Date | number }) =>
        net.openStream(hosts, 'Lease', asDate(opts?.deadline)),
    };
    if (service !== 'Watch' && service !== 'Lease') throw new Error(`the simulated etcd opens no ${service} stream`);
    return fn({ resource: {}, client, metadata: {} });
  };
  proto['markFailed'] = function (this: Pool, ...args: unknown[]) {
    // Routing and retries are the simulated network's; nothing to mark.
    if (!simulated(this)) (saved.markFailed as Fn).call(this, ...args);
  };
  return () => {
    Object.assign(proto, saved);
    installed = undefined;
  };
}
