/**
 * `@idgen/chaos`: `npm run chaos` (issue 7). The entry points are `dist/main.js` (the run) and
 * `dist/caller.js` (one caller process); this surface is the schedule and the verifier, for tests and reuse.
 *
 * @packageDocumentation
 */
export {
  FAULT_KINDS,
  FORWARD_OFFSETS_SECONDS,
  FENCE_MARGIN_MS,
  FULL_ROUND_SECONDS,
  OPT_IN_FAULT_KINDS,
  createRandom,
  createSchedule,
  formatFault,
  keepAliveOf,
  parseFaultKinds,
} from './schedule.js';
export type { Fault, FaultKind, Schedule, ScheduleOptions } from './schedule.js';
export {
  MAX_REPORTED,
  checkClockBound,
  checkHandedOut,
  checkHolders,
  duplicatesPerWindow,
  expandBlocks,
  findDuplicates,
  outageWindows,
} from './verify.js';
export type {
  CallerTimeline,
  ClockAllowance,
  ClockBoundReport,
  DuplicateReport,
  HandedOutReport,
  HolderReport,
  Holding,
  HoldingSpan,
  OutageReport,
  ReceivedBlock,
  Window,
} from './verify.js';
export {
  auditSection,
  callerCostSection,
  callerCostTable,
  expectationsSection,
  formatMs,
  formatReport,
  kindSummary,
  passed,
  reportJson,
} from './report.js';
export {
  NO_FAULT,
  callerCost,
  counterGrowth,
  durationsIn,
  fencesIn,
  outsideSpans,
  percentile,
  summarizeLatency,
} from './caller-cost.js';
export type {
  CallerCostInput,
  CallerCostReport,
  ClientCounts,
  KindCost,
  LatencySummary,
  Span,
  WindowCost,
} from './caller-cost.js';
export { auditConfig, judgeFindings, readRegion, runAudit } from './faults/audit.js';
export type { AuditOutcome, AuditRegion, RunAuditOptions } from './faults/audit.js';
export { followersOf, judgeMemberDown, stopFollower } from './faults/etcd-member-down.js';
export type { MemberDownRun } from './faults/etcd-member-down.js';
export {
  BINDING_LINE,
  EXIT_REGION_REFUSED,
  countKeys,
  judgeWrongRegion,
  runWrongRegionNode,
  wrongRegionOf,
} from './faults/wrong-region-node.js';
export type { WrongRegionOptions, WrongRegionOutcome } from './faults/wrong-region-node.js';
export {
  commonIds,
  idsOf,
  judgeEmptyState,
  judgeTwins,
  runStandaloneEmptyState,
  runStandaloneFault,
  runStandalonePause,
  runStandaloneStep,
} from './faults/standalone.js';
export type { EmptyStart, StandaloneFaultOptions, StandaloneOutcome } from './faults/standalone.js';
export { NO_METRICS, parseNodeMetrics, sumNodeMetrics } from './node-metrics.js';
export type { NodeMetrics } from './node-metrics.js';
export {
  LATENCY_FIELDS,
  STATS_SAMPLE_MS,
  callerFiles,
  decodeIds,
  decodeLatencies,
  decodeTimes,
  encodeIds,
  encodeTimes,
  probeBlocksFile,
  readBlocksFile,
  readCallerRecords,
} from './records.js';
export type { BlockLine, CallerRecords, FailureLine, StatsLine } from './records.js';
