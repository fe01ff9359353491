// test/ holds a suite that drives the real serving stack in this process with raw sockets: files one at a time
// (the machine's 2 cores are shared).
module.exports = require('../../jest.preset.js')(__dirname, { maxWorkers: 1 });
