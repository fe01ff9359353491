/**
 * `@idgen/sim`: the deterministic simulator (issue 32). The etcd model and its transport are exported for specs that
 * want the real lease against a simulated etcd.
 *
 * @packageDocumentation
 */
export { EtcdModel, globalTime, MIN_LEASE_TTL_SECONDS } from './etcd-model.js';
export type { ModelSnapshot, ModelTime } from './etcd-model.js';
export { SimNet, SimStream, installSimNet } from './sim-transport.js';
export type { LinkState, NetRandom } from './sim-transport.js';
export { runScenario, seeded } from './deployment.js';
export type { Fault, RunReport, Scenario, TimedFault, Violation } from './deployment.js';
export { runSimulated, scenarioArb, faultArb } from './runner.js';
export { runRegionsScenario, PREFIX, TTL_CEILING_SECONDS } from './regions.js';
export type {
  ClusterRef,
  RegionsEvent,
  RegionsOptions,
  RegionsReport,
  RegionsScenario,
  RegionsViolation,
  TimedRegionsEvent,
} from './regions.js';
export { Clusters } from './clusters.js';
export { RegistryOperator, SIM_LAYOUT } from './registry-ops.js';
export type { OperatorHooks, OperatorStep, StepOutcome } from './registry-ops.js';
export { operatorStepArb, regionsArb, regionsEventArb, runRegionsSimulated, storyArb } from './regions-runner.js';
