import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, spawnProcess, type ProcessHandle } from '@idgen/testing';
import { ROOT, npm } from './packages.js';

const VERDACCIO = join(ROOT, 'node_modules/verdaccio/bin/verdaccio');

/** A real npm registry (Verdaccio) on loopback that serves only what was published to it. */
export interface LocalRegistry {
  /** `http://127.0.0.1:<port>/`. */
  readonly url: string;
  readonly process: ProcessHandle;
  /** `npm publish <tgz>` as the registry's one user; fails with npm's output when it fails. */
  publish(tgz: string): Promise<void>;
  /**
   * A fresh project in `dir/<name>`: its own package.json, `@idgen` from this registry only (the rest from the
   * default registry) and its own npm cache under `dir`.
   */
  freshProject(name: string): string;
  stop(): Promise<void>;
}

async function waitForRegistry(url: string, verdaccio: ProcessHandle): Promise<void> {
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`${url}-/ping`, { signal: AbortSignal.timeout(2000) })).ok) return;
    } catch {
      // not listening yet
    }
    if (verdaccio.exitStatus() !== undefined) throw new Error(`verdaccio exited:\n${verdaccio.tail(30)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`verdaccio did not answer /-/ping:\n${verdaccio.tail(30)}`);
}

/** Starts Verdaccio with its storage, users and config in `dir` (a temp directory the caller removes). */
export async function startVerdaccio(dir: string): Promise<LocalRegistry> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/`;
  writeFileSync(
    join(dir, 'verdaccio.yaml'),
    [
      `storage: ${join(dir, 'storage')}`,
      'auth:',
      '  htpasswd:',
      `    file: ${join(dir, 'htpasswd')}`,
      '    max_users: 1',
      'uplinks: {}', // nothing leaves the machine: the registry serves only what was published to it
      'packages:',
      "  '@idgen/*':",
      '    access: $all',
      '    publish: $authenticated',
      "  '**':",
      '    access: $all',
      'web:',
      '  enable: false',
      'log: { type: stdout, format: json, level: warn }',
      '',
    ].join('\n'),
  );
  const verdaccio = spawnProcess(process.execPath, [
    VERDACCIO,
    '--config',
    join(dir, 'verdaccio.yaml'),
    '--listen',
    `127.0.0.1:${port}`,
  ]);
  await waitForRegistry(url, verdaccio);

  // A throwaway user and its token, in an .npmrc only the publish commands read.
  const user = await fetch(`${url}-/user/org.couchdb.user:registry-check`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'registry-check', password: `pw-${process.pid}-${port}`, type: 'user', roles: [] }),
    signal: AbortSignal.timeout(10_000),
  });
  if (user.status !== 201) throw new Error(`verdaccio refused the user: ${user.status} ${await user.text()}`);
  const { token } = (await user.json()) as { token: string };
  const publishRc = join(dir, 'publish.npmrc');
  writeFileSync(publishRc, `//127.0.0.1:${port}/:_authToken=${token}\n`);

  return {
    url,
    process: verdaccio,
    async publish(tgz) {
      const r = await npm(['publish', tgz, '--registry', url, '--userconfig', publishRc, '--provenance=false'], dir);
      if (r.code !== 0) throw new Error(`npm publish ${tgz} failed (${r.code}):\n${r.stderr}`);
    },
    freshProject(name) {
      const path = join(dir, name);
      mkdirSync(path, { recursive: true });
      writeFileSync(join(path, 'package.json'), JSON.stringify({ name, version: '1.0.0', private: true }, null, 2));
      writeFileSync(join(path, '.npmrc'), `@idgen:registry=${url}\ncache=${join(dir, 'npm-cache')}\n`);
      return path;
    },
    async stop() {
      await verdaccio.stop();
    },
  };
}
