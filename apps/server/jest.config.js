// Integration suites start real etcd and server processes: one suite at a time on this shared 2-core machine.
module.exports = require('../../jest.preset.js')(__dirname, { maxWorkers: 1 });
