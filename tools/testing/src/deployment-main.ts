// `npm run deployment [-- --regions 3 --nodes 2 --cluster-region 1 --lease-ttl 3]`: starts a deployment
// (startDeployment) for a person to poke at, prints where everything is, and stays up until Ctrl-C (SIGINT) or
// SIGTERM, then tears it all down. It writes the deployment file `idgen audit --config` reads and prints the
// `export` lines that point `idgen` at one region (tools/testing/src/deployment-file.ts).
import { parseArgs } from 'node:util';
import { exportLines, writeDeploymentFile } from './deployment-file.js';
import { startDeployment } from './deployment.js';
import type { StartDeploymentOptions } from './deployment.js';
import { cleanupAll } from './registry.js';

function int(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${flag}: not a whole number: ${value}`);
  return n;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      regions: { type: 'string' },
      nodes: { type: 'string' },
      'cluster-region': { type: 'string' },
      'lease-ttl': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help === true) {
    process.stdout.write(
      'usage: npm run deployment -- [--regions N (5)] [--nodes K (2)] [--cluster-region R] [--lease-ttl S (3)]\n',
    );
    return;
  }
  const options: StartDeploymentOptions = {
    log: (line) => process.stderr.write(`deployment: ${line}\n`),
  };
  const regions = int(values.regions, '--regions');
  const nodes = int(values.nodes, '--nodes');
  const clusterRegion = int(values['cluster-region'], '--cluster-region');
  const ttl = int(values['lease-ttl'], '--lease-ttl');
  if (regions !== undefined) options.regions = regions;
  if (nodes !== undefined) options.nodesPerRegion = nodes;
  if (clusterRegion !== undefined) options.cluster = { region: clusterRegion };
  if (ttl !== undefined) options.leaseTtlSeconds = ttl;

  const d = await startDeployment(options);
  const out: string[] = [];
  const anyRegion = d.regions[0];
  out.push(`idgen deployment in ${d.dir} (prefix ${d.prefix})`);
  out.push(`PKI: CA ${d.pki.caFile}`);
  out.push(`  etcd and node serving certificate: ${d.pki.server.certFile} ${d.pki.server.keyFile}`);
  if (anyRegion !== undefined) {
    out.push(`  etcd client certificate: ${anyRegion.etcd.certFile} ${anyRegion.etcd.keyFile}`);
    out.push(`  callers' client certificate: ${anyRegion.caller.certFile} ${anyRegion.caller.keyFile}`);
  }
  for (const r of d.regions) {
    out.push('');
    out.push(`region ${r.code}: etcd ${r.etcd.endpoints.join(',')}`);
    for (const u of Object.values(r.users)) out.push(`  etcd user ${u.name}: password in ${u.passwordFile}`);
    out.push(`  idgen leases ${d.cliArgs(r.code).join(' ')}`);
    for (const n of r.nodes) {
      out.push(`  node ${n.nodeId}: ${n.url} (metrics ${n.metricsUrl}/metrics, pid ${n.pid})`);
    }
  }
  // The deployment file for `idgen audit`/`whois --config`, and one region's variables for every other verb.
  const file = writeDeploymentFile(d);
  out.push('');
  out.push(`deployment file (idgen audit --config, idgen whois --config): ${file}`);
  out.push(`  node apps/cli/dist/main.js audit --config ${file}`);
  if (anyRegion !== undefined) {
    out.push('');
    out.push(
      `region ${anyRegion.code} for idgen, as idgen-operator (paste into a shell; unset them before npm start):`,
    );
    out.push(...exportLines(d, anyRegion.code));
    out.push('  then: node apps/cli/dist/main.js leases    (or status, next -n 3, region show)');
  }
  if (anyRegion !== undefined && anyRegion.nodes[0] !== undefined) {
    const c = anyRegion.caller;
    out.push('');
    out.push('try:');
    out.push(
      `  curl --cacert ${c.caFile} --cert ${c.certFile} --key ${c.keyFile} -H 'content-type: application/json' ` +
        `-d '{"count":3}' ${anyRegion.nodes[0].url}/idgen.v1.IdGenerator/NextIds`,
    );
    out.push(`  node apps/cli/dist/main.js region show ${d.cliArgs(anyRegion.code).join(' ')}`);
  }
  out.push('');
  out.push('up until Ctrl-C');
  process.stdout.write(`${out.join('\n')}\n`);

  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  process.stderr.write('deployment: stopping\n');
  await d.stop();
  process.stderr.write('deployment: stopped, temp dir removed\n');
}

main().then(
  () => process.exit(0),
  async (e: unknown) => {
    process.stderr.write(`deployment: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    await cleanupAll().catch(() => undefined);
    process.exit(1);
  },
);
