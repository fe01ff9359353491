// registry.spec (every package packed, published and installed) and upgrade.spec (the previous release beside the
// tree on one etcd) each wait on npm, Verdaccio and real processes far more than they compute: side by side.
module.exports = require('../../jest.preset.js')(__dirname, { maxWorkers: 2 });
