/**
 * What a holder has seen of etcd's history (docs/design.md §5, "a rewound etcd is never trusted"): the cluster ID and
 * the highest revision of every answer. etcd's revision never goes down and its cluster ID never changes, except when
 * it is restored from a snapshot (or replaced): then slots claimed after the snapshot, their leases and their `last-ms`
 * are gone, and a holder that trusted the restored records would mint beside holders of the lost history.
 */
export class EtcdHistory {
  private clusterId: string | undefined;
  private revision = 0n;
  private rewound: string | undefined;
  private generation = 0;

  /**
   * How many times the history was started over ({@link reset}). An answer observed after a reset may be the answer
   * to a request sent before it, which the reset's verdict covers: a claim compares the epoch at its start with the
   * epoch at its answer and at its first mint, and is refused when they differ (docs/design.md §5).
   */
  get epoch(): number {
    return this.generation;
  }

  /** Records an answer's header; returns why the history went back, once it has (and every time after). */
  observe(header: { readonly cluster_id?: string; readonly revision?: string } | undefined): string | undefined {
    if (this.rewound !== undefined || header === undefined) return this.rewound;
    const { cluster_id: clusterId, revision } = header;
    if (clusterId !== undefined && clusterId !== '0' && clusterId !== '') {
      if (this.clusterId === undefined) this.clusterId = clusterId;
      else if (clusterId !== this.clusterId) {
        this.rewound = `etcd answered from cluster ${clusterId} after cluster ${this.clusterId}: restored or replaced`;
        return this.rewound;
      }
    }
    if (revision !== undefined && /^[0-9]+$/.test(revision)) {
      const r = BigInt(revision);
      if (r > this.revision) this.revision = r;
      else if (r < this.revision && r > 0n) {
        this.rewound = `etcd's revision went back from ${this.revision} to ${r}: restored from a snapshot`;
        return this.rewound;
      }
    }
    return undefined;
  }

  /** Why the history went back, if it has. */
  get problem(): string | undefined {
    return this.rewound;
  }

  /** Starts over from the next answer (after the holder fenced and treated every slot as unclean). */
  reset(): void {
    this.generation++;
    this.clusterId = undefined;
    this.revision = 0n;
    this.rewound = undefined;
  }
}
