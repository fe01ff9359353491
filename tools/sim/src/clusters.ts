import { EtcdModel, type ModelSnapshot } from './etcd-model.js';
import type { SimNet } from './sim-transport.js';

/** The clusters of a deployment: a region's (by code), the registries, the spare codes' adopters, moved regions. */
export class Clusters {
  readonly models = new Map<string, EtcdModel>();
  /** The cluster each region code lives in now (a move or an adoption changes it). */
  readonly current = new Map<number, string>();
  readonly snapshots = new Map<string, ModelSnapshot>();
  private made = 0;

  constructor(
    readonly net: SimNet,
    private readonly members: number,
    readonly regions: number,
  ) {}

  add(name: string, from?: ModelSnapshot): EtcdModel {
    const n = ++this.made;
    const model = new EtcdModel(
      String(14_000_000_000_000_000_000n + BigInt(n) * 1_000_003n),
      Array.from({ length: this.members }, (_, i) => String(1000 * n + i)),
      undefined,
      7_000_000_000_000_000_000n + BigInt(n) * 100_000_000_000n,
    );
    if (from !== undefined) model.restore(from);
    this.models.set(name, model);
    this.net.addCluster(name, model, this.members);
    return model;
  }

  model(name: string): EtcdModel {
    const m = this.models.get(name);
    if (m === undefined) throw new Error(`no simulated cluster ${name}`);
    return m;
  }

  /** A fresh cluster ID for a restore onto a new token. */
  freshId(): string {
    return String(15_000_000_000_000_000_000n + BigInt(++this.made));
  }

  /**
   * A cluster the schedule names ({@link ClusterRef}): a region code's cluster now (0-99, modulo the regions), the
   * registry (100), the second registry (101), a spare code's adopter (105, 106), or any cluster by index (200 +).
   */
  resolve(ref: number): string {
    if (ref >= 200) {
      const names = [...this.models.keys()];
      return names[(ref - 200) % names.length] as string;
    }
    if (ref === 100) return 'reg';
    if (ref === 101) return 'reg2';
    if (ref === 105) return 'x5';
    if (ref === 106) return 'x6';
    return this.current.get(ref % this.regions) ?? 'r0';
  }

  close(): void {
    for (const m of this.models.values()) m.close();
  }
}
