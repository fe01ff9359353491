// Prints one closing line over every project's jest run (with how long it took), the ten slowest spec files, and
// every failed test with the first lines of its message; fails when a project ran no test, skipped one, or failed
// one. Used by the root `npm test` after `nx run-many`, whether or not that passed, so a failure is named in the last lines of the run.
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

const dir = new URL('../../.jest-results/', import.meta.url).pathname;
const rows = existsSync(dir)
  ? readdirSync(dir)
      .filter((f) => f.endsWith('.json'))
      .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')))
  : [];
/** `12.3 s`, or `?` for a project recorded before durations were. */
function seconds(ms) {
  return typeof ms === 'number' ? `${(ms / 1000).toFixed(1)} s` : '?';
}
let passed = 0,
  failed = 0,
  skipped = 0,
  bad = [];
for (const r of rows) {
  passed += r.passed;
  failed += r.failed;
  skipped += r.skipped;
  console.log(
    `${r.project.padEnd(22)} ${String(r.passed).padStart(5)} passed ${String(r.failed).padStart(3)} failed ${String(r.skipped).padStart(3)} skipped ${seconds(r.durationMs).padStart(7)}`,
  );
  for (const f of r.failures ?? []) {
    bad.push(`${r.project} failed: ${f.where} › ${f.test}\n${f.message.replace(/^/gm, '    ')}`);
  }
  if (r.passed === 0) bad.push(`${r.project} ran no test`);
  if (r.skipped > 0) bad.push(`${r.project} skipped ${r.skipped} test(s)`);
}
if (rows.length === 0) bad.push('no project reported test results');
const slowest = rows
  .flatMap((r) => r.files ?? [])
  .sort((a, b) => b.ms - a.ms)
  .slice(0, 10);
if (slowest.length > 0) console.log('slowest spec files:');
for (const f of slowest) console.log(`  ${seconds(f.ms).padStart(7)}  ${f.where}`);
for (const b of bad) console.log(`test-summary: ${b}`);
console.log(`jest: ${passed} passed, ${failed} failed`);
process.exit(failed > 0 || bad.length > 0 ? 1 : 0);
