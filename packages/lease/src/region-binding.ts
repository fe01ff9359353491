import type { Etcd3 } from 'etcd3';
import type { Layout } from '@idgen/core';
import { deadlineIn, firstKey, withTimeout } from './etcd-client.js';
import { CorruptRecordError, LeaseError } from './errors.js';
import { parseJsonObject } from './records.js';

/**
 * The region binding (docs/design.md §5): `{prefix}/region` in a region's etcd says which region code that etcd
 * serves, and which etcd cluster it was written in. Written once, on purpose, by `idgen region init`
 * (`initRegion`, region-init.ts); every node, embedded caller and spare-code command reads it before its first claim or write
 * ({@link checkRegionBinding}) and refuses when its own code differs, when the etcd was never initialised, or when
 * etcd now reports another cluster ID. Without it nothing ties an etcd to a code: a node started with `--region 3`
 * against region 2's etcd would claim region 3's slots there and mint region 3's IDs beside region 3's own nodes.
 */
export interface RegionBindingRecord {
  /** The region code this etcd serves. */
  readonly code: number;
  /** etcd's cluster ID (decimal) when the binding was written: a replaced or restored cluster reports another. */
  readonly clusterId: string;
  /** When the binding was written (ISO-8601). */
  readonly at: string;
  /** When `idgen region restored` last rebound it after a restore (ISO-8601), if ever. */
  readonly restoredAt?: string;
  /**
   * How many clusters the code has been bound to, this one included (docs/design.md §5, "One live cluster per code"):
   * 1 from `idgen region init` (a record without the field is generation 1), one more each time `idgen region restored`
   * rebinds the code to another cluster. The audit compares it across etcds: of two etcds bound to one code, only the
   * one with the highest generation and no `retired` may have holders.
   */
  readonly generation?: number;
  /** The cluster this binding moved from (`idgen region restored` onto another cluster), if it did. */
  readonly previousClusterId?: string;
  /**
   * Set in the old cluster when `idgen region restored --retire-etcd` moved the code to another one: no holder may claim
   * here any more, and the retire deleted every worker key, which fences every holder at once.
   */
  readonly retired?: RegionRetirement;
}

/** A binding's retirement (docs/design.md §5, "One live cluster per code"). */
export interface RegionRetirement {
  /** When (ISO-8601). */
  readonly at: string;
  /** The cluster ID the code moved to. */
  readonly byClusterId: string;
  /** The generation of the binding there. */
  readonly generation: number;
}

/** A binding's generation: 1 when the record has none (written by `idgen region init`, or by a release before it). */
export const bindingGeneration = (r: RegionBindingRecord): number => r.generation ?? 1;

/** The binding's key under a prefix. */
export const regionBindingKey = (prefix: string): string => `${prefix}/region`;

/** A region binding that refuses this process or operator step: never retried (docs/design.md §5). */
export class RegionBindingError extends LeaseError {
  /**
   * The etcd is bound to this code but answers from another cluster (restored with a new token, or replaced): what
   * the operator's `idgen region restored` ends, so a holder waits for it (unready) instead of giving up.
   */
  readonly awaitsOperator: boolean;
  constructor(message: string, awaitsOperator = false) {
    super('region-binding', message, false);
    this.name = 'RegionBindingError';
    this.awaitsOperator = awaitsOperator;
  }
}

/** Parses `{prefix}/region`; garbage throws {@link CorruptRecordError} naming the key and the field. */
export function parseRegionBinding(key: string, raw: string, maxRegion = 7): RegionBindingRecord {
  const o = parseJsonObject(key, raw);
  const code = o['code'];
  if (typeof code !== 'number' || !Number.isSafeInteger(code) || code < 0 || code > maxRegion) {
    throw new CorruptRecordError(key, `field code is not a region code 0-${maxRegion}`, raw);
  }
  const clusterId = o['clusterId'];
  if (typeof clusterId !== 'string' || !/^[0-9]+$/.test(clusterId)) {
    throw new CorruptRecordError(key, 'field clusterId is not a decimal cluster ID', raw);
  }
  const at = o['at'];
  if (typeof at !== 'string') throw new CorruptRecordError(key, 'field at is not a string', raw);
  const restoredAt = o['restoredAt'];
  if (restoredAt !== undefined && typeof restoredAt !== 'string')
    throw new CorruptRecordError(key, 'field restoredAt is not a string', raw);
  const generation = o['generation'];
  if (
    generation !== undefined &&
    (typeof generation !== 'number' || !Number.isSafeInteger(generation) || generation < 1)
  )
    throw new CorruptRecordError(key, 'field generation is not a positive integer', raw);
  const previousClusterId = o['previousClusterId'];
  if (previousClusterId !== undefined && typeof previousClusterId !== 'string')
    throw new CorruptRecordError(key, 'field previousClusterId is not a string', raw);
  const retired = parseRetirement(key, o['retired'], raw);
  return {
    code,
    clusterId,
    at,
    ...(restoredAt === undefined ? {} : { restoredAt }),
    ...(generation === undefined ? {} : { generation }),
    ...(previousClusterId === undefined ? {} : { previousClusterId }),
    ...(retired === undefined ? {} : { retired }),
  };
}

function parseRetirement(key: string, v: unknown, raw: string): RegionRetirement | undefined {
  if (v === undefined) return undefined;
  const o = v as Record<string, unknown> | null;
  if (
    typeof o !== 'object' ||
    o === null ||
    typeof o['at'] !== 'string' ||
    typeof o['byClusterId'] !== 'string' ||
    typeof o['generation'] !== 'number' ||
    !Number.isSafeInteger(o['generation'])
  ) {
    throw new CorruptRecordError(key, 'field retired is not {"at", "byClusterId", "generation"}', raw);
  }
  return { at: o['at'], byClusterId: o['byClusterId'], generation: o['generation'] };
}

/** A region's etcd under its prefix. */
export interface BindingIo {
  readonly client: Etcd3;
  readonly prefix: string;
  readonly timeoutMs: number;
}

/** What {@link checkRegionBinding} found: the binding, and the cluster ID etcd answered with. */
export interface RegionBindingCheck {
  readonly record: RegionBindingRecord;
  readonly clusterId: string;
  /** The revision of etcd's answer (the binding's own mod revision is at or below it). */
  readonly revision: string;
}

function initHint(prefix: string, code: number): string {
  return `run "idgen region init --region ${code} --etcd …${prefix === '/idgen' ? '' : ` --etcd-prefix ${prefix}`}" once against this region's etcd (docs/runbook.md, "Binding a region's etcd to its code")`;
}

/**
 * Reads the binding and refuses unless it names `code` in the cluster etcd answers from (docs/design.md §5). Throws a
 * {@link RegionBindingError} (not retryable) with one line saying what to do; etcd errors pass through (retryable).
 */
export async function checkRegionBinding(
  io: BindingIo & { layout: Layout },
  code: number,
): Promise<RegionBindingCheck> {
  const key = regionBindingKey(io.prefix);
  const res = await withTimeout(
    io.client.get(key).options(deadlineIn(io.timeoutMs)).exec(),
    io.timeoutMs,
    `reading ${key}`,
  );
  const read = firstKey(res.kvs);
  if (read === undefined) {
    throw new RegionBindingError(
      `this etcd was never bound to a region code (${key} is absent): ${initHint(io.prefix, code)}; ` +
        'a node refuses an unbound etcd so that one pointed at the wrong region can never mint',
    );
  }
  const record = parseRegionBinding(key, read.value, io.layout.maxRegion);
  if (record.code !== code) {
    throw new RegionBindingError(
      `this etcd serves region ${record.code} (${key}), not region ${code}: check --region and --etcd ` +
        `(a node on another region's etcd would mint region ${code}'s IDs beside region ${code}'s own nodes)`,
    );
  }
  if (record.retired !== undefined) {
    throw new RegionBindingError(
      `region ${code} moved out of this etcd (${key} retired at ${record.retired.at}; it now lives in cluster ` +
        `${record.retired.byClusterId}, generation ${record.retired.generation}): point --etcd at that cluster ` +
        '(docs/runbook.md, "Moving a region to a new etcd cluster")',
    );
  }
  const clusterId = res.header.cluster_id;
  if (record.clusterId !== clusterId) {
    throw new RegionBindingError(
      `this etcd reports cluster ${clusterId}, but region ${code} was bound in cluster ${record.clusterId} (${key}): ` +
        'a restored or replaced etcd is never trusted: after a restore, run "idgen region restored" (docs/runbook.md, "etcd restored from a snapshot")',
      true,
    );
  }
  return { record, clusterId, revision: res.header.revision };
}
