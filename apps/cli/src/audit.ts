/**
 * What `idgen audit` and `idgen whois` read: the deployment file and each region's keys at one revision. The rules
 * are @idgen/lease/records' (`auditDeployment`, `whoisTenure`): this file only reads etcd.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { LeaseConfigError, etcdConnectionFromFlags, resolveConnection, type NamedValue } from '@idgen/lease';
import { regionViewOf, type RegionView } from '@idgen/lease/records';
import { CliError, isCliError, usageError } from './exit-codes.js';
import { openEtcdClient, unreachableAfter } from './etcd-state.js';
import type { Deadlines, EtcdConnection, EtcdFlags } from './options.js';
import { etcdConnection } from './options.js';

/** One region of a deployment file: its name and its etcd. */
export interface DeploymentRegion {
  readonly name: string;
  readonly connection: EtcdConnection;
}

/**
 * Reads `idgen audit --config` / `idgen whois --config`: `{"regions": [{"name", "etcd": [urls] | "a,b", "prefix"?,
 * "ca"?, "cert"?, "key"?, "user"?, "passwordFile"?}, …]}`. File paths are relative to the file. The connection rules
 * are @idgen/lease's (the flags' own); every problem is a usage error (exit 2) naming the region and the field.
 */
export function readDeploymentFile(path: string): DeploymentRegion[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw usageError(`--config ${path}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw usageError(`--config ${path}: not JSON (${(e as Error).message})`);
  }
  const regions = (doc as { regions?: unknown } | null)?.regions;
  if (!Array.isArray(regions) || regions.length === 0)
    throw usageError(`--config ${path}: field regions is not a non-empty array`);
  const base = dirname(resolve(path));
  const names = new Set<string>();
  return regions.map((r: unknown, i): DeploymentRegion => {
    const at = `--config ${path}: regions[${i}]`;
    if (typeof r !== 'object' || r === null || Array.isArray(r)) throw usageError(`${at} is not an object`);
    const o = r as Record<string, unknown>;
    const name = o['name'];
    if (typeof name !== 'string' || name === '') throw usageError(`${at}.name is not a non-empty string`);
    if (names.has(name)) throw usageError(`${at}.name ${JSON.stringify(name)} is listed twice`);
    names.add(name);
    const etcd = o['etcd'];
    const urls = Array.isArray(etcd) && etcd.every((u) => typeof u === 'string') ? etcd.join(',') : etcd;
    if (typeof urls !== 'string') throw usageError(`${at}.etcd is not a list of etcd URLs`);
    const field = (f: string, file: boolean): NamedValue | undefined => {
      const v = o[f];
      if (v === undefined) return undefined;
      if (typeof v !== 'string') throw usageError(`${at}.${f} is not a string`);
      return { value: file ? resolve(base, v) : v, name: `regions[${i}].${f}` };
    };
    try {
      const options = etcdConnectionFromFlags({
        etcd: { value: urls, name: `regions[${i}].etcd` },
        prefix: field('prefix', false),
        ca: field('ca', true),
        cert: field('cert', true),
        key: field('key', true),
        user: field('user', false),
        passwordFile: field('passwordFile', true),
      });
      const { prefix } = resolveConnection(options);
      return { name, connection: { options, keyPrefix: prefix === '/' ? '' : prefix } };
    } catch (e) {
      if (e instanceof LeaseConfigError) throw usageError(`${at} (${name}): ${e.problems.join('; ')}`);
      throw e;
    }
  });
}

/**
 * The holders' tenure journals to audit with the etcds (docs/design.md §5 "A witness outside the etcd"): the deployment
 * file's `"journals": [paths]` (relative to the file) and every `--journal`.
 */
export function journalsOf(flags: { config?: string; journal?: readonly string[] }): string[] {
  const out: string[] = [];
  if (flags.config !== undefined) {
    const doc = JSON.parse(readFileSync(flags.config, 'utf8')) as { journals?: unknown };
    const j = doc.journals;
    if (j !== undefined) {
      if (!Array.isArray(j) || !j.every((x) => typeof x === 'string' && x !== ''))
        throw usageError(`--config ${flags.config}: field journals is not a list of paths`);
      const base = dirname(resolve(flags.config));
      out.push(...(j as string[]).map((p) => resolve(base, p)));
    }
  }
  return [...out, ...(flags.journal ?? [])];
}

/** The regions of `--config`, or the one etcd of `--etcd` (named "etcd"). */
export function deploymentOf(flags: EtcdFlags & { config?: string }): DeploymentRegion[] {
  if (flags.config !== undefined && flags.etcd !== undefined) throw usageError('give --config or --etcd, not both');
  if (flags.config !== undefined) return readDeploymentFile(flags.config);
  // --etcd, IDGEN_ETCD or etcdctl's ETCDCTL_ENDPOINTS: one region's etcd.
  if (flags.etcd !== undefined || (process.env['ETCDCTL_ENDPOINTS'] ?? '') !== '')
    return [{ name: 'etcd', connection: etcdConnection(flags) }];
  throw usageError('--config <deployment.json> is required (or --etcd for one region)');
}

/** Reads one region's keys at one revision; an etcd without an answer within `timeoutMs` is an exit-3 CliError. */
async function readRegion(region: DeploymentRegion, d: Deadlines): Promise<RegionView> {
  const { timeoutMs } = d;
  const { options, keyPrefix: prefix } = region.connection;
  const where = `${region.name} (etcd ${options.endpoints.join(',')})`;
  const client: Etcd3 = await openEtcdClient(region.connection, d, { retryReads: true }).catch((e: unknown) => {
    // `r5 (etcd http://…): connection refused`, as a failed read says it.
    throw isCliError(e)
      ? new CliError(e.exitCode, `${region.name} ${e.message.replace(/^(etcd \S+?): /, '($1): ')}`)
      : e;
  });
  try {
    const res = await unreachableAfter(
      client
        .getAll()
        .prefix(`${prefix}/`)
        .options({ deadline: new Date(Date.now() + timeoutMs) })
        .exec(),
      timeoutMs,
      where,
    );
    return regionViewOf({
      name: region.name,
      where,
      prefix,
      clusterId: res.header.cluster_id,
      revision: res.header.revision,
      kvs: res.kvs.map((kv) => ({
        key: kv.key.toString('utf8'),
        value: kv.value.toString('utf8'),
        lease: String(kv.lease),
      })),
    });
  } finally {
    client.close();
  }
}

/** Reads every region at once; the regions that did not answer come back as their one-line reasons. */
export async function readDeployment(
  regions: readonly DeploymentRegion[],
  d: Deadlines,
): Promise<{ views: RegionView[]; unreachable: string[] }> {
  const settled = await Promise.allSettled(regions.map((r) => readRegion(r, d)));
  const views: RegionView[] = [];
  const unreachable: string[] = [];
  for (const s of settled) {
    if (s.status === 'fulfilled') views.push(s.value);
    else if (isCliError(s.reason)) unreachable.push(s.reason.message);
    else throw s.reason;
  }
  return { views, unreachable };
}
