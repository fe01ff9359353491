#!/usr/bin/env node
// The `idgen` command: runs the compiled CLI (`npm ci` at the repository root builds it).
require('../dist/main.js');
