#!/usr/bin/env node
// The `idgen-server` command: runs the compiled generator node (`npm run build` builds it).
require('../dist/main.js');
