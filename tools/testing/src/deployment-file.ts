// What an operator needs to point `idgen` at a running deployment (startDeployment, `npm run deployment`): the
// deployment file `idgen audit --config` and `idgen whois --config` read, and the `export` lines that give every
// other verb one region's etcd and the nodes' TLS through their IDGEN_* variables (apps/cli/README.md).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Deployment, DeploymentUserName } from './deployment.js';

/**
 * Writes `{dir}/deployment.json`, one entry per region as `idgen audit --config` reads it (name `r{code}`, its etcd
 * endpoints, prefix, CA, client certificate and key, and `user`'s name and password file), and returns its path.
 * The file lives in the deployment's directory: `stop()` removes it with the rest.
 */
export function writeDeploymentFile(d: Deployment, user: DeploymentUserName = 'idgen-operator'): string {
  const regions = d.regions.map((r) => ({
    name: `r${r.code}`,
    etcd: [...r.etcd.endpoints],
    prefix: d.prefix,
    ca: r.etcd.caFile,
    cert: r.etcd.certFile,
    key: r.etcd.keyFile,
    user: r.users[user].name,
    passwordFile: r.users[user].passwordFile,
  }));
  const file = join(d.dir, 'deployment.json');
  writeFileSync(file, `${JSON.stringify({ regions }, null, 2)}\n`);
  return file;
}

/** Quotes `value` for a POSIX shell when it needs it. */
function shellQuote(value: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * The `export` lines an operator pastes into a shell to run `idgen` against region `code` as `user`: the etcd flags'
 * variables (IDGEN_ETCD, IDGEN_ETCD_CA, …, IDGEN_ETCD_PASSWORD_FILE, IDGEN_ETCD_PREFIX), the nodes' TLS
 * (IDGEN_TLS_CA, and the caller's certificate for mTLS as IDGEN_TLS_CERT and IDGEN_TLS_KEY) and IDGEN_REGION.
 */
export function exportLines(d: Deployment, code: number, user: DeploymentUserName = 'idgen-operator'): string[] {
  const r = d.region(code);
  const vars: [string, string][] = [
    ['IDGEN_ETCD', r.etcd.endpoints.join(',')],
    ['IDGEN_ETCD_PREFIX', d.prefix],
    ['IDGEN_ETCD_CA', r.etcd.caFile],
    ['IDGEN_ETCD_CERT', r.etcd.certFile],
    ['IDGEN_ETCD_KEY', r.etcd.keyFile],
    ['IDGEN_ETCD_USER', r.users[user].name],
    ['IDGEN_ETCD_PASSWORD_FILE', r.users[user].passwordFile],
    ['IDGEN_TLS_CA', r.caller.caFile],
    ['IDGEN_TLS_CERT', r.caller.certFile],
    ['IDGEN_TLS_KEY', r.caller.keyFile],
    ['IDGEN_REGION', String(code)],
  ];
  return vars.map(([k, v]) => `export ${k}=${shellQuote(v)}`);
}
