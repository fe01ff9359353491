// The install-sizes file the registry check writes: a row replaced in place, a new one added, the header fixed.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, tempDirSync } from '@idgen/testing';
import { INSTALL_SIZES_FILE, recordInstallSize } from './install-sizes.js';

afterAll(() => cleanupAll());

it('records a row per install, replacing its own row and keeping the others in order', () => {
  const file = join(tempDirSync('install-sizes').path, 'install-sizes.md');
  recordInstallSize('npm install @idgen/client', { packages: 7, mb: 4.3 }, file);
  recordInstallSize('npm install @idgen/embedded', { packages: 46, mb: 13.24 }, file);
  recordInstallSize('npm install @idgen/client', { packages: 7, mb: 5 }, file);
  const text = readFileSync(file, 'utf8');
  expect(text.split('\n').filter((l) => l.startsWith('| `'))).toEqual([
    '| `npm install @idgen/client` | 7 | 5.0 MB |',
    '| `npm install @idgen/embedded` | 46 | 13.2 MB |',
  ]);
  expect(text).toMatch(/^# Install sizes\n\nWritten by the registry check/);
});

it('the repository`s file has the rows the registry check records', () => {
  const rows = readFileSync(INSTALL_SIZES_FILE, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('| `'))
    .map((l) => /^\| `([^`]+)`/.exec(l)?.[1]);
  expect(rows).toEqual([
    'npm install @idgen/client @idgen/core',
    'npm install @idgen/client @idgen/discovery',
    'npm install @idgen/embedded',
  ]);
});
