// docs/install-sizes.md: how big each published install is, as the registry check measured it (issue 33: the sizes
// the READMEs stated by hand had drifted). registry.spec.ts records a row for each install it makes; the READMEs link
// to the file instead of repeating figures.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The file the registry check writes. */
export const INSTALL_SIZES_FILE = join(__dirname, '..', '..', '..', 'docs', 'install-sizes.md');

const HEADER = `# Install sizes

Written by the registry check (\`tools/registry-check/test/registry.spec.ts\`, in \`npm test\`) each time it runs: each
install is \`npm install\` of the published packages from a real registry (Verdaccio on loopback, third-party packages
from the default registry) into an empty project, then its \`node_modules\` counted (packages, and bytes of their
files). Not edited by hand; a change here after a test run is a change in what users install.

| install | packages | size |
| --- | --- | --- |
`;

/** One install's figures: how many packages `node_modules` holds, and their size in MB (10^6 bytes, one decimal). */
export interface InstallSize {
  readonly packages: number;
  readonly mb: number;
}

/** The rows of an install-sizes file: install command → its row's text, in file order. */
function rowsOf(text: string): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of text.split('\n')) {
    const m = /^\| `([^`]+)` \|/.exec(line);
    if (m?.[1] !== undefined) rows.set(m[1], line);
  }
  return rows;
}

/**
 * Records `size` for `install` (the command, e.g. `npm install @idgen/client`) in `file`: its row replaced, or
 * added after the others; the rest of the file is the fixed header. Writes only when the text changes.
 */
export function recordInstallSize(install: string, size: InstallSize, file = INSTALL_SIZES_FILE): void {
  const before = existsSync(file) ? readFileSync(file, 'utf8') : '';
  const rows = rowsOf(before);
  rows.set(install, `| \`${install}\` | ${size.packages} | ${size.mb.toFixed(1)} MB |`);
  const after = `${HEADER}${[...rows.values()].join('\n')}\n`;
  if (after !== before) writeFileSync(file, after);
}
