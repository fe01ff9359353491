// The node's suites that load the machine themselves (apps/server/jest.load.config.js runs them alone).
module.exports = [
  'abuse.spec.ts',
  'abuse-serving.spec.ts',
  'fuzz-config.spec.ts',
  'fuzz-wire.spec.ts',
  'h2spec.spec.ts',
  'lease-under-attack.spec.ts',
];
