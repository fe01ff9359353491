#!/usr/bin/env node
// The `idgen-server` command: runs the compiled generator node (`npx nx run @idgen/server:build` builds it).
require('../dist/main.js').main(process.argv.slice(2), process.env);
