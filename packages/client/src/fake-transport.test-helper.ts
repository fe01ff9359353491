import { Code, ConnectError } from '@connectrpc/connect';
import { DEFAULT_LAYOUT } from '@idgen/core';
import type { IdBlock } from './id-buffer.js';
import type { AttemptOptions, IdTransport, IdTransportFactory, NodeTarget } from './transport.js';

/** How a fake node answers. */
export type FakeBehaviour =
  | 'ok' // answers at once with fresh IDs
  | 'manual' // holds each request until the test calls respond() / fail()
  | 'unavailable' // ConnectError UNAVAILABLE (fenced, draining)
  | 'refused' // a refused connection (ECONNREFUSED)
  | 'hang' // never answers (a SIGSTOPped process)
  | 'invalid-argument'
  | 'garbage'; // answers with more IDs than asked for

interface Pending {
  count: number;
  resolve(blocks: readonly IdBlock[]): void;
  reject(e: unknown): void;
}

/** One fake generator node: mints real-layout IDs from its own region and worker. */
export class FakeNode {
  behaviour: FakeBehaviour = 'ok';
  /** Counts of every request received, in order. */
  readonly requests: number[] = [];
  readonly pending: Pending[] = [];
  /** Blocks per answer (to test multi-block responses). */
  blocksPerAnswer = 1;
  private ms = 1;

  constructor(
    readonly url: string,
    readonly region: number,
    readonly worker: number,
  ) {}

  /** Mints `count` IDs as `blocksPerAnswer` blocks, each in its own fake millisecond. */
  mint(count: number): IdBlock[] {
    const blocks: IdBlock[] = [];
    const per = Math.ceil(count / this.blocksPerAnswer);
    for (let left = count; left > 0; left -= per) {
      const n = Math.min(per, left);
      const first = DEFAULT_LAYOUT.compose({
        timestampMs: this.ms++,
        region: this.region,
        worker: this.worker,
        sequence: 0,
      });
      blocks.push({ first, count: n });
    }
    return blocks;
  }

  /** Answers the oldest held request with fresh IDs. */
  respond(): void {
    const p = this.pending.shift();
    if (p === undefined) throw new Error(`${this.url} holds no request`);
    p.resolve(this.mint(p.count));
  }

  /** Fails the oldest held request. */
  fail(code: Code = Code.Unavailable): void {
    const p = this.pending.shift();
    if (p === undefined) throw new Error(`${this.url} holds no request`);
    p.reject(new ConnectError('fake failure', code));
  }

  handle(count: number, options: AttemptOptions): Promise<readonly IdBlock[]> {
    this.requests.push(count);
    switch (this.behaviour) {
      case 'ok':
        return Promise.resolve(this.mint(count));
      case 'unavailable':
        return Promise.reject(new ConnectError('node is fenced', Code.Unavailable));
      case 'refused':
        return Promise.reject(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }));
      case 'invalid-argument':
        return Promise.reject(new ConnectError(`count must be from 1 to 4096, got ${count}`, Code.InvalidArgument));
      case 'garbage':
        return Promise.resolve(this.mint(count + 1));
      case 'hang':
      case 'manual':
        return new Promise<readonly IdBlock[]>((resolve, reject) => {
          const p: Pending = { count, resolve, reject };
          if (this.behaviour === 'manual') this.pending.push(p);
          options.signal.addEventListener('abort', () => {
            const i = this.pending.indexOf(p);
            if (i >= 0) this.pending.splice(i, 1);
            reject(new ConnectError('aborted', Code.Canceled));
          });
        });
    }
  }
}

/** A set of fake nodes addressed by URL, and the transport factory that reaches them. */
export class FakeNetwork {
  readonly nodes = new Map<string, FakeNode>();
  /** Every request in order: which node, how many. */
  readonly log: { url: string; count: number }[] = [];
  readonly closed: string[] = [];
  created = 0;
  private inFlight = 0;
  maxInFlight = 0;
  private worker = 0;

  /** Adds a node; its URL is `http://<name>:8080`. */
  add(name: string, region: number): FakeNode {
    const node = new FakeNode(`http://${name}:8080`, region, this.worker++);
    this.nodes.set(node.url, node);
    return node;
  }

  get(name: string): FakeNode {
    const node = this.nodes.get(`http://${name}:8080`);
    if (node === undefined) throw new Error(`no fake node ${name}`);
    return node;
  }

  readonly factory: IdTransportFactory = (target: NodeTarget): IdTransport => {
    this.created++;
    return {
      nextIds: async (count, options) => {
        const node = this.nodes.get(target.url);
        this.log.push({ url: target.url, count });
        if (node === undefined) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
        this.inFlight++;
        this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
        try {
          return await node.handle(count, options);
        } finally {
          this.inFlight--;
        }
      },
      close: () => {
        this.closed.push(target.url);
      },
    };
  };

  /** URLs in request order (for failover-order assertions). */
  order(): string[] {
    return this.log.map((l) => l.url.replace(/^http:\/\//, '').replace(/:8080$/, ''));
  }
}
