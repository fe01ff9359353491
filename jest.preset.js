// Shared jest settings: swc transforms TypeScript (type-checking is the `typecheck` target),
// workspace packages resolve to their sources through the `@idgen/source` export condition,
// and generated protobuf code's `.js` import suffixes are stripped.
const path = require('node:path');

/** @param {string} dir the project's directory (pass __dirname) */
module.exports = function preset(dir, overrides = {}) {
  return {
    rootDir: dir,
    displayName: require(path.join(dir, 'package.json')).name,
    testEnvironment: 'node',
    testEnvironmentOptions: { customExportConditions: ['@idgen/source', 'node', 'require', 'default'] },
    transform: {
      '^.+\\.ts$': [
        '@swc/jest',
        {
          jsc: { parser: { syntax: 'typescript' }, target: 'es2022' },
          module: { type: 'commonjs' },
          sourceMaps: 'inline',
        },
      ],
      '/node_modules/commander/.+\\.js$': ['@swc/jest', { jsc: { target: 'es2022' }, module: { type: 'commonjs' } }],
    },
    // commander 15 ships ES modules only. Node 24 require()s them (so do the built CommonJS packages), but Jest's
    // CommonJS runtime cannot without --experimental-vm-modules: swc turns it into CommonJS for the specs alone.
    transformIgnorePatterns: ['/node_modules/(?!commander/)'],
    moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
    testMatch: ['<rootDir>/src/**/*.spec.ts', '<rootDir>/test/**/*.spec.ts'],
    moduleFileExtensions: ['ts', 'js', 'json'],
    // In CI a handle a test leaked ends the run once its results are in ("Force exiting Jest" is printed), rather
    // than hanging it to CI's time limit; locally Jest waits and names the leak ("Jest did not exit").
    forceExit: process.env.CI === 'true',
    reporters: [
      'default',
      [
        path.join(__dirname, 'tools/scripts/jest-results-reporter.js'),
        { name: require(path.join(dir, 'package.json')).name },
      ],
    ],
    ...overrides,
  };
};
