/**
 * The printed report of a chaos run (issue 7): duration, IDs checked, faults (time, kind, target), fences,
 * duplicates, outage windows, and a verdict.
 */
import { formatRegions } from './regions.js';
import type { CallerCostReport, ClientCounts, KindCost, LatencySummary, WindowCost } from './caller-cost.js';
import type { AuditOutcome } from './faults/audit.js';
import type { ChaosResult } from './run.js';
import { formatFault } from './schedule.js';

const s1 = (ms: number): string => `${(ms / 1000).toFixed(1)}s`;
const n = (x: number): string => x.toLocaleString('en-US');

/** The report as text lines. */
export function formatReport(r: ChaosResult): string[] {
  const out: string[] = [];
  const ok = (bad: number): string => (bad === 0 ? 'OK' : 'VIOLATED');
  out.push('================ idgen chaos report ================');
  out.push(
    `seed ${r.seed} · load ${s1(r.loadMs)} · ${r.faults.length} faults · ${r.nodeProcesses} node processes (${r.supervisorRestarts} restarted by the supervisor, ${r.spareRestarts} of them spares finding no free slot)`,
  );
  const kinds =
    (r.regions !== undefined ? ` --regions ${r.regions.regions.length}` : '') +
    (r.netns ? ' --netns' : '') +
    (r.kinds !== undefined ? ` --faults ${r.kinds.join(',')}` : '');
  out.push(
    `reproduce: npm run chaos -- --duration ${Math.round(r.durationMs / 1000)} --seed ${r.seed}${kinds}${r.serverMainFlag !== undefined ? ` --server-main ${r.serverMainFlag}` : ''}${r.previousServer !== undefined ? ` --previous-server ${r.previousServer}` : ''}`,
  );
  out.push(...versionLines(r));
  out.push('');
  out.push('callers:');
  for (const c of r.callersSummary) {
    out.push(
      `  caller ${c.caller}: ${n(c.ids)} IDs handed out in ${n(c.calls)} calls, ${n(c.blocks)} blocks received, ${n(c.failed)} failed calls`,
    );
  }
  if (r.probeBlocks > 0)
    out.push(`  clock-jump probe: ${n(r.probeBlocks)} blocks of 1 ID (verified with the callers' blocks)`);
  if (r.embedded !== undefined) {
    const e = r.embedded;
    out.push(
      `  embedded callers (slots ${e.workers}): ${e.processes} processes (${e.restarts} restarted after a kill), ${n(e.ids)} IDs minted in-process in ${n(e.blocks)} blocks, verified with the nodes' under rules 1-3`,
    );
    const refused = Object.entries(e.refusedBy)
      .map(([k, v]) => `${k} ${n(v)}`)
      .join(', ');
    out.push(`    refused calls by reason (IdsUnavailableError, processes that ran to the end): ${refused || 'none'}`);
    for (const f of e.faults)
      out.push(`    t+${s1(f.startedMs)}…t+${s1(f.endedMs)} ${f.kind} on ${f.target}: ${f.notes.join('; ')}`);
  }
  out.push('');
  out.push(`rule 1, zero duplicates: ${ok(r.duplicates.duplicates + r.handedOutDuplicates.duplicates)}`);
  out.push(
    `  ${n(r.duplicates.checked)} IDs received from nodes checked (every ID of every block), ${r.duplicates.duplicates} duplicates`,
  );
  if (r.duplicatesByFault.length > 0) {
    out.push(
      `  by the fault window their millisecond lies in: ${r.duplicatesByFault.map((d) => `${d.label}: ${n(d.duplicates)}`).join('; ')}`,
    );
  }
  out.push(
    `  ${n(r.handedOutDuplicates.checked)} IDs handed out by the clients checked, ${r.handedOutDuplicates.duplicates} duplicates`,
  );
  out.push(
    `  ${n(r.handedOut.checked)} handed-out IDs traced to a received block: ${r.handedOut.invented} invented ${ok(r.handedOut.invented)}`,
  );
  for (const d of [...r.duplicates.examples, ...r.handedOutDuplicates.examples, ...r.handedOut.examples].slice(0, 10))
    out.push(`    ${d}`);
  out.push(`rule 2, successive holders of a slot never overlap: ${ok(r.holders.violationCount)}`);
  out.push(
    `  ${r.holders.slots} slots, ${r.holders.holdings} holdings with IDs, ${r.holders.handovers} handovers checked, ${r.holders.violationCount} violations`,
  );
  for (const [worker, spans] of r.holders.spans) {
    out.push(`  worker ${worker}: ${spans.map((sp) => `${sp.holding.name}(${n(sp.ids)})`).join(' → ')}`);
  }
  for (const v of r.holders.violations) out.push(`    ${v}`);
  out.push(`rule 3, no ID more than 10 ms ahead of the wall clock at arrival: ${ok(r.clock.violationCount)}`);
  out.push(
    `  ${n(r.clock.blocks)} blocks checked, largest lead ${r.clock.maxLeadMs} ms (negative: every ID older than its arrival)`,
  );
  if (r.clockAllowances.length > 0) {
    out.push(
      `  ${n(r.clock.allowedAhead)} blocks ahead by an injected forward jump (${r.clockAllowances.length} jumps: +${[...new Set(r.clockAllowances.map((a) => a.aheadMs / 1000))].join(' s, +')} s), allowed that lead`,
    );
  }
  for (const v of r.clock.violations) out.push(`    ${v}`);
  out.push('');
  out.push('faults (times from load start):');
  for (const f of r.faults) {
    out.push(`  ${formatFault(f.fault)}`);
    out.push(
      `      ran t+${s1(f.startedMs)}…t+${f.endedMs !== undefined ? s1(f.endedMs) : '?'} on ${f.target}; ${f.notes.join('; ')}`,
    );
    if (f.safetyViolation !== undefined) out.push(`      SAFETY VIOLATED: ${f.safetyViolation}`);
    if (f.expectationMissed !== undefined) out.push(`      EXPECTATION MISSED: ${f.expectationMissed}`);
  }
  for (const f of r.skipped) out.push(`  SKIPPED (no time left after slow recoveries): ${formatFault(f)}`);
  out.push('');
  out.push('rule 4, outages per window (longest time one caller went without an ID; failed calls):');
  for (const w of r.outages) {
    const who = w.longestGapCaller >= 0 ? ` (caller ${w.longestGapCaller} from t+${s1(w.longestGapStartMs)})` : '';
    out.push(
      `  ${w.window.label.padEnd(24)} t+${s1(w.window.startMs).padStart(7)}  longest gap ${String(Math.round(w.longestGapMs)).padStart(6)} ms${who}, ${w.failedCalls} failed / ${w.calls} ok calls`,
    );
  }
  out.push('');
  out.push(
    'per fault kind (runs; longest time one caller went without an ID; failed calls; expectations missed; safety violated):',
  );
  for (const k of kindSummary(r)) {
    out.push(
      `  ${k.kind.padEnd(23)} ${String(k.runs).padStart(3)} runs  longest gap ${String(Math.round(k.longestGapMs)).padStart(6)} ms  ${String(k.failedCalls).padStart(4)} failed calls  ${k.missed} missed  ${k.unsafe} unsafe`,
    );
  }
  out.push('');
  out.push(...callerCostSection(r.callerCost));
  out.push('');
  const fences = Object.entries(r.metrics.fences)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  out.push(`fences (nodes' /metrics, last scrape of each process): ${fences || 'none'}`);
  out.push(
    `  clock rollbacks: ${r.metrics.rollbacksWaited} waited out, ${r.metrics.rollbacksFenced} fenced; lease churn: ${
      Object.entries(r.metrics.leaseChurn)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || 'none'
    }; IDs minted ${n(r.metrics.idsMinted)}`,
  );
  out.push(
    `  fences logged by the guards: ${
      Object.entries(r.fencesByReason)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || 'none'
    }`,
  );
  out.push('');
  out.push(...callerCostTable(r.callerCost.byKind));
  out.push(...partitionSection(r));
  if (r.regions !== undefined) out.push(...formatRegions(r.regions));
  out.push('');
  out.push(...auditSection(r.audit));
  out.push('');
  out.push(...expectationsSection(r));
  out.push(
    `VERDICT: ${passed(r) ? 'PASS' : 'FAIL'}: ${r.violations} rule violations, ${r.safetyViolations} safety expectations violated, audit ${r.audit.ok ? 'clean' : `FAILED (exit ${r.audit.exitCode ?? 'signal'})`}`,
  );
  return out;
}

/**
 * The run passes when every rule held, every fault's safety expectation held (an ID handed out twice, a node that
 * should have been refused serving: counted like a rule violation), and `idgen audit` found its etcd clean (exit 0).
 */
export function passed(r: Pick<ChaosResult, 'violations' | 'safetyViolations' | 'audit'>): boolean {
  return r.violations === 0 && r.safetyViolations === 0 && r.audit.ok;
}

/**
 * The summary's two classes of fault expectations: safety (each one listed: it fails the run) and liveness (counted:
 * reported, it does not fail the run).
 */
export function expectationsSection(
  r: Pick<ChaosResult, 'faults' | 'expectationsMissed' | 'safetyViolations'>,
): string[] {
  const unsafe = r.faults.filter((f) => f.safetyViolation !== undefined);
  return [
    `safety expectations violated: ${r.safetyViolations} (they fail the run)`,
    ...unsafe.map((f) => `  #${f.fault.index} ${f.fault.kind}: ${f.safetyViolation ?? ''}`),
    `expectations missed: ${r.expectationsMissed} (liveness, reported; they do not fail the run)`,
  ];
}

/** The report's section "audit": the deployment audit of the run's etcds once everything stopped (a failure fails the run). */
export function auditSection(a: AuditOutcome): string[] {
  return [
    `audit (auditDeployment, idgen audit's rules, of the run's etcds after every node and caller stopped): ${a.ok ? 'OK' : 'FAILED'}`,
    ...a.lines.map((l) => `  ${l}`),
  ];
}

/**
 * Rule 4 per fault kind: how many ran, the longest outage one caller saw, failed calls, expectations missed, and
 * safety expectations violated.
 */
export function kindSummary(
  r: Pick<ChaosResult, 'faults' | 'outages'>,
): { kind: string; runs: number; longestGapMs: number; failedCalls: number; missed: number; unsafe: number }[] {
  const byKind = new Map<
    string,
    { kind: string; runs: number; longestGapMs: number; failedCalls: number; missed: number; unsafe: number }
  >();
  for (const f of r.faults) {
    const k = byKind.get(f.fault.kind) ?? {
      kind: f.fault.kind,
      runs: 0,
      longestGapMs: 0,
      failedCalls: 0,
      missed: 0,
      unsafe: 0,
    };
    k.runs++;
    if (f.expectationMissed !== undefined) k.missed++;
    if (f.safetyViolation !== undefined) k.unsafe++;
    const w = r.outages.find((o) => o.window.label === `#${f.fault.index} ${f.fault.kind}`);
    if (w !== undefined) {
      k.longestGapMs = Math.max(k.longestGapMs, w.longestGapMs);
      k.failedCalls += w.failedCalls;
    }
    byKind.set(f.fault.kind, k);
  }
  return [...byKind.values()].sort((a, b) => a.kind.localeCompare(b.kind));
}

/** A latency in ms: three decimals below 1 ms (a buffered call takes microseconds), two below 10, one below 100. */
export function formatMs(ms: number): string {
  return ms < 1 ? ms.toFixed(3) : ms < 10 ? ms.toFixed(2) : ms < 100 ? ms.toFixed(1) : String(Math.round(ms));
}

/** Fences by reason as `lease 2, clock-ahead 1`, or `none`. */
function fenceList(f: Readonly<Record<string, number>>): string {
  return (
    Object.entries(f)
      .filter(([, v]) => v > 0)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none'
  );
}

function latencyText(l: LatencySummary): string {
  return `${n(l.calls)} calls (${n(l.failed)} failed)  p50 ${formatMs(l.p50Ms)} ms  p99 ${formatMs(l.p99Ms)} ms  max ${formatMs(l.maxMs)} ms  caller's own timer late ≤ ${formatMs(l.callerLateMaxMs)} ms`;
}

function clientText(c: ClientCounts): string {
  return `discarded ${n(c.discarded)} IDs  hedges ${n(c.hedgesSent)} sent / ${n(c.hedgesWon)} won (${n(c.hedgeBlocksDiscarded)} losing blocks dropped)  refused ${n(c.refusedBlocks)} blocks`;
}

function costLine(w: WindowCost, at: string): string {
  return `  ${w.label.padEnd(24)} ${at}  ${latencyText(w.latency)}  ${clientText(w.client)}  fences ${fenceList(w.fences)}`;
}

/**
 * The report's section "caller cost per window" (issue 25): each window's call latency, the IDs the clients
 * discarded, their hedges, and the fences logged in it; then the time outside any fault.
 */
export function callerCostSection(c: CallerCostReport): string[] {
  const outsideMs = c.outside.spans.reduce((t, sp) => t + sp.endMs - sp.startMs, 0);
  return [
    "caller cost per window (each caller's nextIds(10) calls by their start, failed ones included: latency p50/p99/max; the clients' stats(): IDs their buffers discarded, hedged refills, refused blocks; fences: the guards' log lines):",
    ...c.windows.map((w) => costLine(w, `t+${s1(w.spans[0]?.startMs ?? 0).padStart(7)}`)),
    costLine(c.outside, `${s1(outsideMs)} in ${c.outside.spans.length} spans`),
    "  (outside any fault: every moment outside each fault's planned window, its effect and recovery)",
  ];
}

/** Which build each node process ran (`tree`, or the `--previous-server` release's version), by version. */
function versionLines(r: ChaosResult): string[] {
  const byVersion = new Map<string, string[]>();
  for (const v of r.nodeVersions) byVersion.set(v.version, [...(byVersion.get(v.version) ?? []), v.name]);
  return [...byVersion].map(([version, names]) => `node processes of ${version}: ${names.join(' ')}`);
}

/** The table "what each fault costs a caller" (issue 25): one row per fault kind, the no-fault time first. */
export function callerCostTable(rows: readonly KindCost[]): string[] {
  const head = `  ${'kind'.padEnd(24)} ${'runs'.padStart(4)} ${'failed'.padStart(6)} ${'longest gap'.padStart(11)} ${'p50 ms'.padStart(7)} ${'p99 ms'.padStart(7)} ${'max ms'.padStart(7)} ${'own stall'.padStart(9)} ${'discarded'.padStart(9)} ${'hedges'.padStart(11)}  fences by reason`;
  return [
    "what each fault costs a caller (per kind, its windows merged: nextIds(10) calls that started in them, failed ones included; longest gap and failed calls as in rule 4; own stall: the longest a caller's own timer woke late, which a gap includes and a call's latency does not; IDs discarded by the clients' buffers; hedges sent/won; the guards' fences):",
    head,
    ...rows.map(
      (k) =>
        `  ${k.kind.padEnd(24)} ${(k.runs === 0 ? '-' : String(k.runs)).padStart(4)} ${n(k.failedCalls).padStart(6)} ${`${n(Math.round(k.longestGapMs))} ms`.padStart(11)} ${formatMs(k.latency.p50Ms).padStart(7)} ${formatMs(k.latency.p99Ms).padStart(7)} ${formatMs(k.latency.maxMs).padStart(7)} ${formatMs(k.latency.callerLateMaxMs).padStart(9)} ${n(k.client.discarded).padStart(9)} ${`${n(k.client.hedgesSent)}/${n(k.client.hedgesWon)}`.padStart(11)}  ${fenceList(k.fences)}`,
    ),
  ];
}

const msOr = (ms: number | undefined, none: string): string => (ms === undefined ? none : `${n(Math.round(ms))} ms`);

/**
 * The partitions side by side (issue 25, item 5): each run of `partition-node` / `partition-clock-forward` (the TCP
 * proxy: reads and drops, closes every connection on restore) and of `netns-partition` (the router namespace drops
 * silently, the kernels retransmit) with the cut node's figures, then their kinds' rows of the caller cost table.
 */
export function partitionSection(r: Pick<ChaosResult, 'faults' | 'callerCost'>): string[] {
  const runs = r.faults.filter((f) => f.partition !== undefined);
  if (runs.length === 0) return [];
  const kinds = new Set(runs.map((f) => f.fault.kind as string));
  const table = callerCostTable(r.callerCost.byKind.filter((k) => kinds.has(k.kind)));
  return [
    '',
    "partitions side by side (proxy: the TCP proxy reads and drops, closes every connection on restore; netns: the router namespace drops silently both ways, the kernels retransmit; cut→fence: to the cut node's first fence line; heal→etcd: to its first claim etcd settled after the heal, a slot claimed or held, or refused for no free slot):",
    `  ${'fault'.padEnd(28)} ${'via'.padEnd(5)} ${'node'.padEnd(6)} ${'cut'.padStart(9)} ${'cut→fence'.padStart(9)} ${'takeover'.padStart(9)} ${'heal→etcd'.padStart(9)}  ${'probe ok/refused'.padStart(16)}  fences (answer)`,
    ...runs.map((f) => {
      const p = f.partition as NonNullable<typeof f.partition>;
      return `  ${`#${f.fault.index} ${f.fault.kind}`.padEnd(28)} ${p.via.padEnd(5)} ${f.target.padEnd(6)} ${msOr(p.cutMs, '-').padStart(9)} ${msOr(p.cutToFenceMs, 'none').padStart(9)} ${msOr(p.takeoverMs, 'none').padStart(9)} ${msOr(p.healToEtcdMs, '> 30 s').padStart(9)}  ${`${n(p.probeOk)}/${n(p.probeFailed)}`.padStart(16)}  ${fenceList(p.fences)} (${p.healAnswer ?? 'no answer seen'})`;
    }),
    '  their caller cost (rows of the table above):',
    ...table.slice(1),
  ];
}

/** The result as JSON (bigints as decimal strings). */
export function reportJson(r: ChaosResult): string {
  return JSON.stringify(
    { ...r, holders: { ...r.holders, spans: Object.fromEntries(r.holders.spans) } },
    (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v),
    2,
  );
}
