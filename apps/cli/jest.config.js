// The CLI's specs wait on real etcds, nodes and the five-region deployment fixture far more than they compute: two
// files at a time (each starts its own processes on free ports, tools/testing), which halves the project's longest
// path in CI's three-at-a-time step.
module.exports = require('../../jest.preset.js')(__dirname, { maxWorkers: 2 });
