// Integration suites under test/ start etcd and server processes: run test files one at a time
// (the machine's 2 cores are shared; preamble: `--runInBand` for integration suites).
module.exports = require('../../jest.preset.js')(__dirname, { maxWorkers: 1 });
