// Lets a plain `node` child process run the workspace's TypeScript sources, the way jest does in-process
// (jest.preset.js): @swc/core strips the types, `.js` import suffixes resolve to `.ts` files, and
// `node --conditions=@idgen/source` maps workspace packages to their `src/index.ts`.
// Use via `tsNodeArgs()` from @idgen/testing: node --conditions=@idgen/source --require <this> script.ts
'use strict';
const Module = require('node:module');
const fs = require('node:fs');
const { transformSync } = require('@swc/core');

const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, parent, ...rest) {
  try {
    return resolve.call(this, request, parent, ...rest);
  } catch (e) {
    if (request.startsWith('.') && request.endsWith('.js')) {
      return resolve.call(this, request.slice(0, -3) + '.ts', parent, ...rest);
    }
    throw e;
  }
};

require.extensions['.ts'] = function (module, filename) {
  const source = fs.readFileSync(filename, 'utf8');
  const { code } = transformSync(source, {
    filename,
    jsc: { parser: { syntax: 'typescript' }, target: 'es2022' },
    module: { type: 'commonjs' },
    sourceMaps: 'inline',
  });
  module._compile(code, filename);
};
