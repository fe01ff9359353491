import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanupAll, readmeExample, runTsExample } from '@idgen/testing';

// The README opens with an example tool: run it, as written, in a child process (docs/style.md "Tests": a README
// snippet that a test runs), with a variable it reads and with one it refuses, and compare with what the README says it prints.
jest.setTimeout(60_000);
afterAll(() => cleanupAll());

const README = join(__dirname, '..', 'README.md');

it('the README example reads IDGEN_COUNT and prints the values, as the README says', async () => {
  const { exit, child } = await runTsExample(readmeExample(README), { IDGEN_COUNT: '5' });
  expect({ code: exit.code, output: exit.code === 0 ? '' : child.tail(20) }).toEqual({ code: 0, output: '' });
  const printed = child.stdoutLines.join('\n');
  expect(printed).toBe('{"count":5,"format":"decimal","from":"IDGEN_COUNT"}');
  expect(readFileText()).toContain(`\`${printed}\``);
});

it('the README example refuses IDGEN_FORMAT=octal with the line the README gives, and exit 2', async () => {
  const { exit, child } = await runTsExample(readmeExample(README), { IDGEN_FORMAT: 'octal' });
  expect(exit.code).toBe(2);
  expect(child.stdoutLines).toEqual([]);
  expect(child.stderrLines).toEqual(['ids: IDGEN_FORMAT must be one of decimal, hex, got "octal" (see --help)']);
  expect(readFileText()).toContain(`\`${child.stderrLines[0]}\``);
});

/** The README, its lines joined, to find what it says the example prints. */
function readFileText(): string {
  return readFileSync(README, 'utf8').replace(/\n/g, ' ');
}
