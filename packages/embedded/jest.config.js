// Suites start etcd and many leases in one process: run test files one at a time (the machine's cores are
// shared; preamble: `--runInBand` for integration suites).
module.exports = require('../../jest.preset.js')(__dirname, { maxWorkers: 1 });
