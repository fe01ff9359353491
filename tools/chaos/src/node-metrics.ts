/**
 * The few Prometheus series of a generator node the chaos report needs (the server exports them on
 * `--metrics-listen`: `idgen_fences_total{reason}`, `idgen_clock_rollbacks_total{outcome}`,
 * `idgen_ids_minted_total`, `idgen_lease_churn_total{event}`).
 */

/** One scrape of one node, reduced. */
export interface NodeMetrics {
  /** Fences entered, by reason (docs/design.md §2: count what comes before a duplicate). */
  readonly fences: Readonly<Record<string, number>>;
  readonly rollbacksWaited: number;
  readonly rollbacksFenced: number;
  readonly idsMinted: number;
  /** Lease churn, by event (acquired, lost, …). */
  readonly leaseChurn: Readonly<Record<string, number>>;
}

/** An empty sample (nothing counted). */
export const NO_METRICS: NodeMetrics = {
  fences: {},
  rollbacksWaited: 0,
  rollbacksFenced: 0,
  idsMinted: 0,
  leaseChurn: {},
};

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)/;

function labelsOf(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (text === undefined) return out;
  for (const m of text.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) out[m[1] as string] = m[2] as string;
  return out;
}

/** Reads the series above out of Prometheus text exposition. Unknown lines are ignored. */
export function parseNodeMetrics(text: string): NodeMetrics {
  const fences: Record<string, number> = {};
  const leaseChurn: Record<string, number> = {};
  let rollbacksWaited = 0;
  let rollbacksFenced = 0;
  let idsMinted = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    if (m === null) continue;
    const name = m[1] as string;
    const labels = labelsOf(m[2]);
    const value = Number(m[3]);
    if (!Number.isFinite(value)) continue;
    if (name === 'idgen_fences_total')
      fences[labels['reason'] ?? 'unknown'] = (fences[labels['reason'] ?? 'unknown'] ?? 0) + value;
    else if (name === 'idgen_clock_rollbacks_total') {
      if (labels['outcome'] === 'waited') rollbacksWaited += value;
      else if (labels['outcome'] === 'fenced') rollbacksFenced += value;
    } else if (name === 'idgen_ids_minted_total') idsMinted += value;
    else if (name === 'idgen_lease_churn_total')
      leaseChurn[labels['event'] ?? 'unknown'] = (leaseChurn[labels['event'] ?? 'unknown'] ?? 0) + value;
  }
  return { fences, rollbacksWaited, rollbacksFenced, idsMinted, leaseChurn };
}

/** Adds samples (of different node processes) together. */
export function sumNodeMetrics(samples: readonly NodeMetrics[]): NodeMetrics {
  const fences: Record<string, number> = {};
  const leaseChurn: Record<string, number> = {};
  let rollbacksWaited = 0;
  let rollbacksFenced = 0;
  let idsMinted = 0;
  for (const s of samples) {
    for (const [k, v] of Object.entries(s.fences)) fences[k] = (fences[k] ?? 0) + v;
    for (const [k, v] of Object.entries(s.leaseChurn)) leaseChurn[k] = (leaseChurn[k] ?? 0) + v;
    rollbacksWaited += s.rollbacksWaited;
    rollbacksFenced += s.rollbacksFenced;
    idsMinted += s.idsMinted;
  }
  return { fences, rollbacksWaited, rollbacksFenced, idsMinted, leaseChurn };
}
