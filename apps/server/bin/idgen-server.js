#!/usr/bin/env -S node --max-semi-space-size=16
// The `idgen-server` command: runs the compiled generator node (`npx nx run @idgen/server:build` builds it).
//
// The V8 flags on the first line are the node's supported launch flags, and the one place they are written:
// the Dockerfile, the systemd unit, `npm start`, the tests, the benchmarks and the chaos fleet all run the node
// with the flags read from this line (apps/server/test/deploy.spec.ts checks the deploy files carry them).
// --max-semi-space-size=16 (MB) bounds V8's young generation as Node 20 did by default: Node 24 sizes it by the
// machine's memory (64 MB semi-spaces here), and under an HTTP/1.1 flood the node's RSS reached 490-519 MB
// instead of 185 MB on Node 20 (apps/server/test/abuse-serving.spec.ts), past a 512 MiB container limit.
require('../dist/main.js').main(process.argv.slice(2), process.env);
