// The lease specs wait on lease TTLs, floors and the start hold far more than they compute (the project ran 674 s
// with the CPU at a load of 0.4, one file at a time): three files at a time, each with its own etcd on free ports
// (a start on a port taken meanwhile is tried again, tools/testing/src/etcd.ts).
module.exports = require('../../jest.preset.js')(__dirname, { maxWorkers: 3 });
