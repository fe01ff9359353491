// Child process for faketime.spec.ts: mints through a real guard on the real (faked) clock and records
// every block it got. Plain JavaScript over the built package, so libfaketime sees a plain `node`.
'use strict';
const fs = require('node:fs');
// Through the package's own exports (its built CommonJS entry), as a user's require would resolve it.
const { createGuardedMinter, isFencedError } = require('@idgen/clock-guard');

const [outFile, durationText] = process.argv.slice(2);
const durationMs = Number(durationText);
const say = (o) => process.stdout.write(`${JSON.stringify({ ...o, wallMs: Date.now(), monoMs: performance.now() })}\n`);

const guard = createGuardedMinter({ region: 3, maxFenceMs: 60_000, checkIntervalMs: 20 });
guard.on('state', (s) => say({ event: 'state', state: s.state, reason: s.reason, message: s.message }));
guard.assign({
  region: 3,
  worker: 9,
  floorMs: Date.now() - 1,
  deadlineMonoMs: Number.POSITIVE_INFINITY,
  ceilingMs: Number.POSITIVE_INFINITY,
});

const chunks = [];
let minted = 0;
let refused = 0;
const start = performance.now();
say({ event: 'ready' });

function tick() {
  for (let i = 0; i < 40; i++) {
    try {
      for (const b of guard.nextBlock(25)) {
        const rec = Buffer.alloc(12);
        rec.writeBigUInt64BE(b.first, 0);
        rec.writeUInt32BE(b.count, 8);
        chunks.push(rec);
        minted += b.count;
      }
    } catch (e) {
      if (!isFencedError(e)) throw e;
      refused++;
    }
  }
  if (performance.now() - start < durationMs) {
    setTimeout(tick, 1);
  } else {
    fs.writeFileSync(outFile, Buffer.concat(chunks));
    guard.close();
    say({ event: 'done', minted, refused });
  }
}
tick();
