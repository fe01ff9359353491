// Nodes say what they run, so a mixed-version region shows: the version and commit in GetStatus (fields 25-26), on
// `target_info` and in the `ready` line, from IDGEN_COMMIT or the git checkout the server runs from. Real server
// processes and real git repositories in temporary directories.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, tempDirSync } from '@idgen/testing';
import { gitCommit, readBuildInfo } from '../src/build-info.js';
import { idClient, startServer, type ServerNode } from './support.test-helper.js';

jest.setTimeout(90_000);
afterAll(() => cleanupAll());

const SERVER_DIR = join(__dirname, '..');
const VERSION = (JSON.parse(readFileSync(join(SERVER_DIR, 'package.json'), 'utf8')) as { version: string }).version;
const COMMIT = '0123456789abcdef0123456789abcdef01234567';

/** Runs git in `cwd` (a throwaway identity, no user configuration) and returns its trimmed stdout. */
function git(cwd: string, ...args: string[]): string {
  return execFileSync(
    'git',
    ['-c', 'user.name=idgen test', '-c', 'user.email=test@idgen.invalid', '-c', 'init.defaultBranch=main', ...args],
    { cwd, encoding: 'utf8', env: { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' } },
  ).trim();
}

/** A fresh repository with one commit; returns its directory and HEAD. */
function repoWithCommit(name: string): { dir: string; head: string } {
  const dir = tempDirSync(name).path;
  git(dir, 'init', '-q');
  writeFileSync(join(dir, 'a.txt'), `${name}\n`);
  git(dir, 'add', 'a.txt');
  git(dir, 'commit', '-q', '-m', 'one');
  return { dir, head: git(dir, 'rev-parse', 'HEAD') };
}

async function scrapeTargetInfo(node: ServerNode): Promise<string> {
  const text = await (await fetch(node.metricsUrl ?? '', { signal: AbortSignal.timeout(5_000) })).text();
  return text.split('\n').find((l) => l.startsWith('target_info{')) ?? '';
}

describe('a real node', () => {
  it('with IDGEN_COMMIT: GetStatus, target_info and the ready line carry the version and that commit', async () => {
    const node = await startServer(['--time-source', 'none'], { IDGEN_COMMIT: COMMIT });
    try {
      const ready = await node.ready();
      expect(ready).toMatchObject({ version: VERSION, commit: COMMIT });
      // Redacted (no mTLS, --status-details auto): the version is not a secret and stays.
      const status = await idClient(node.baseUrl, 'grpc-h2').getStatus({});
      expect({ version: status.version, commit: status.commit, redacted: status.detailsRedacted }).toEqual({
        version: VERSION,
        commit: COMMIT,
        redacted: true,
      });
      const json = await idClient(node.baseUrl, 'connect-json-http1').getStatus({});
      expect([json.version, json.commit]).toEqual([VERSION, COMMIT]);
      const info = await scrapeTargetInfo(node);
      expect(info).toContain(`service_version="${VERSION}"`);
      expect(info).toContain(`idgen_commit="${COMMIT}"`);
    } finally {
      await node.stop();
    }
  });

  it('without IDGEN_COMMIT: the HEAD of the git checkout it runs from', async () => {
    // What git itself says of the directory the server runs from (empty when the tests run outside a checkout).
    const r = spawnSync('git', ['rev-parse', 'HEAD'], { cwd: SERVER_DIR, encoding: 'utf8' });
    const head = r.status === 0 ? r.stdout.trim() : '';
    const node = await startServer(['--time-source', 'none']);
    try {
      await node.ready();
      const status = await idClient(node.baseUrl, 'grpc-h2').getStatus({});
      expect([status.version, status.commit]).toEqual([VERSION, head]);
      const info = await scrapeTargetInfo(node);
      if (head === '') expect(info).not.toContain('idgen_commit=');
      else expect(info).toContain(`idgen_commit="${head}"`);
    } finally {
      await node.stop();
    }
  });

  it('a malformed IDGEN_COMMIT is said once and the checkout asked instead; the node still starts', async () => {
    const node = await startServer(['--time-source', 'none'], { IDGEN_COMMIT: 'not a commit\nline two' });
    try {
      await node.ready();
      const warned = node.logs().filter((l) => l.level === 'warn' && l['variable'] === 'IDGEN_COMMIT');
      expect(warned.map((l) => l.msg)).toEqual([expect.stringMatching(/^IDGEN_COMMIT is not a commit/)]);
      const status = await idClient(node.baseUrl, 'grpc-h2').getStatus({});
      expect(status.commit).not.toContain('not a commit');
    } finally {
      await node.stop();
    }
  });
});

describe('reading the commit from a git checkout (real git repositories)', () => {
  it('follows HEAD to a loose ref, from a subdirectory', () => {
    const { dir, head } = repoWithCommit('git-loose');
    const sub = join(dir, 'apps', 'server');
    mkdirSync(sub, { recursive: true });
    expect(gitCommit(sub)).toBe(head);
  });

  it('finds a ref in packed-refs, and a detached HEAD', () => {
    const { dir, head } = repoWithCommit('git-packed');
    git(dir, 'pack-refs', '--all');
    expect(readFileSync(join(dir, '.git', 'packed-refs'), 'utf8')).toContain(head);
    expect(gitCommit(dir)).toBe(head);
    writeFileSync(join(dir, 'b.txt'), 'b\n');
    git(dir, 'add', 'b.txt');
    git(dir, 'commit', '-q', '-m', 'two');
    const second = git(dir, 'rev-parse', 'HEAD');
    git(dir, 'checkout', '-q', '--detach', head);
    expect(gitCommit(dir)).toBe(head);
    git(dir, 'checkout', '-q', 'main');
    expect(gitCommit(dir)).toBe(second);
  });

  it('reads a worktree (`.git` a file pointing at the main repository)', () => {
    const { dir } = repoWithCommit('git-main');
    writeFileSync(join(dir, 'c.txt'), 'c\n');
    git(dir, 'add', 'c.txt');
    git(dir, 'commit', '-q', '-m', 'three');
    const worktree = join(tempDirSync('git-worktree').path, 'wt');
    git(dir, 'worktree', 'add', '-q', '-b', 'side', worktree, 'HEAD~1');
    expect(gitCommit(worktree)).toBe(git(worktree, 'rev-parse', 'HEAD'));
    expect(gitCommit(worktree)).not.toBe(gitCommit(dir));
  });

  it('says nothing outside a checkout, and nothing for a copy installed under node_modules', () => {
    const outside = tempDirSync('no-git').path;
    expect(gitCommit(outside)).toBeUndefined();
    const { dir } = repoWithCommit('git-app');
    const installed = join(dir, 'node_modules', '@idgen', 'server');
    mkdirSync(installed, { recursive: true });
    writeFileSync(join(installed, 'package.json'), JSON.stringify({ version: '9.9.9' }));
    // The application's repository is not the server's source: no commit rather than the wrong one.
    expect(readBuildInfo({}, installed)).toEqual({ version: '9.9.9', commit: '', commitFrom: 'none' });
    expect(readBuildInfo({ IDGEN_COMMIT: ' abc1234 ' }, installed)).toEqual({
      version: '9.9.9',
      commit: 'abc1234',
      commitFrom: 'env',
    });
  });
});
