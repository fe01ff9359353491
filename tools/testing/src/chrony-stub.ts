// A stand-in `chronyc` for tests: prints whatever line the test last wrote into a file. The real chronyc
// cannot be driven into "not synchronised" and back on demand; its output format is what is under test.
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDirSync } from './net.js';

/** `chronyc -c tracking` of a synchronised clock 0.012 ms off. */
export const CHRONY_HEALTHY =
  'A29FC87B,ntp1.example,2,1700000000.123,0.000012,0.000010,0.000020,-1.2,0.001,0.02,0.001,0.0005,64.0,Normal';
/** `chronyc -c tracking` of a clock that is not synchronised. */
export const CHRONY_UNSYNCHRONISED =
  '00000000,,0,0.000000000,0.000000000,0.000000000,0.000000000,0.000,0.000,0.000,0.000000000,0.000000000,0.0,Not synchronised';

/** A directory holding an executable `chronyc`, and a way to change what it says. */
export interface ChronyStub {
  /** Directory to put first on PATH. */
  readonly dir: string;
  /** Full path of the stub, for `chronycPath`. */
  readonly path: string;
  say(line: string): void;
}

export function createChronyStub(initial: string): ChronyStub {
  const dir = tempDirSync('idgen-chronyc').path;
  const out = join(dir, 'tracking.csv');
  const path = join(dir, 'chronyc');
  writeFileSync(out, `${initial}\n`);
  writeFileSync(path, `#!/bin/sh\ncat '${out}'\n`);
  chmodSync(path, 0o755);
  return { dir, path, say: (line) => writeFileSync(out, `${line}\n`) };
}
