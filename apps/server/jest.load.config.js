// The node's suites that load the machine themselves: the abuse suites (floods of connections and frames), the wire
// and configuration fuzzers (hundreds of requests and server starts) and h2spec. `npm test` runs them alone, after
// every other project's specs (target test-load); apps/server/jest.config.js runs the rest beside the other projects.
const preset = require('../../jest.preset.js');
const path = require('node:path');

const LOAD_SUITES = require('./jest.load-suites.js');
const base = preset(__dirname, { maxWorkers: 1 });
module.exports = {
  ...base,
  displayName: '@idgen/server (load suites)',
  testMatch: LOAD_SUITES.map((f) => `<rootDir>/test/${f}`),
  reporters: [
    'default',
    [path.join(__dirname, '../../tools/scripts/jest-results-reporter.js'), { name: '@idgen/server (load suites)' }],
  ],
};
