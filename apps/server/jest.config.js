// Integration suites start real etcd and server processes: one suite at a time. These wait on etcd, TTLs and
// processes more than they compute, so `npm test` runs them beside the other projects; the suites that load the
// machine themselves (jest.load-suites.js) run alone afterwards (jest.load.config.js, target test-load).
const LOAD_SUITES = require('./jest.load-suites.js');
module.exports = require('../../jest.preset.js')(__dirname, {
  maxWorkers: 1,
  testPathIgnorePatterns: ['/node_modules/', ...LOAD_SUITES.map((f) => `/test/${f.replace(/\./g, '\\.')}$`)],
});
