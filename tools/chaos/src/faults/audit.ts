/**
 * `idgen audit` at the end of every chaos run (issue 21, item 9): once the callers, the embedded callers and the
 * nodes have stopped, and before etcd is torn down, the run writes a deployment file for its etcd and runs the built
 * CLI against it (`apps/cli/dist/main.js audit --config … --json`). The audit reads what etcd holds (the region
 * binding, every slot's tenure record and `last-ms`: docs/design.md §5) and proves or refutes the deployment's
 * invariants on its own, apart from the run's ID checks: exit 0 clean, 1 with a violation, 3 when an etcd did not
 * answer. Anything but 0 fails the run.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { spawnProcess } from '@idgen/testing';

/** One region of the audit's deployment file (`idgen audit --config`: apps/cli/src/audit.ts). */
export interface AuditRegion {
  readonly name: string;
  readonly etcd: readonly string[];
  readonly prefix: string;
}

/** What the audit said, for the report. */
export interface AuditOutcome {
  /** The CLI's exit code (null: ended by a signal, e.g. killed after its time limit). */
  readonly exitCode: number | null;
  /** Exit 0 and a clean JSON answer. */
  readonly ok: boolean;
  /** The report's lines: the verdict, one per region read, one per violation or unreachable etcd. */
  readonly lines: readonly string[];
}

/** The deployment file `idgen audit --config` reads. */
export function auditConfig(regions: readonly AuditRegion[]): string {
  return `${JSON.stringify({ regions: regions.map((r) => ({ name: r.name, etcd: [...r.etcd], prefix: r.prefix })) }, null, 2)}\n`;
}

interface AuditJson {
  clean?: unknown;
  regions?: { name?: unknown; code?: unknown; clusterId?: unknown; revision?: unknown; slots?: unknown }[];
  unreachable?: unknown[];
  findings?: { kind?: unknown; message?: unknown }[];
}

const EXIT_MEANING: Readonly<Record<number, string>> = {
  0: 'clean',
  1: 'violation',
  2: 'usage error',
  3: 'unreachable',
};

/**
 * Turns the audit's exit code and output (`--json`: one JSON object on stdout) into report lines and a verdict.
 * Only exit 0 with `clean: true` passes; a violation (1), an unreachable etcd (3), a usage error (2), a signal or an
 * answer that is not the audit's JSON all fail, each with the lines that say why.
 */
export function judgeAudit(
  exitCode: number | null,
  stdout: readonly string[],
  stderr: readonly string[] = [],
): AuditOutcome {
  let j: AuditJson | undefined;
  for (const l of [...stdout].reverse()) {
    if (!l.trimStart().startsWith('{')) continue;
    try {
      j = JSON.parse(l) as AuditJson;
      break;
    } catch {
      // not the answer
    }
  }
  const meaning = exitCode === null ? 'ended by a signal' : (EXIT_MEANING[exitCode] ?? 'unexpected exit code');
  const findings = j?.findings ?? [];
  const unreachable = j?.unreachable ?? [];
  const ok = exitCode === 0 && j !== undefined && j.clean === true && findings.length === 0 && unreachable.length === 0;
  const lines: string[] = [];
  lines.push(
    `idgen audit: exit ${exitCode ?? 'signal'} (${meaning}): ${
      ok
        ? 'clean'
        : j === undefined
          ? 'no JSON answer'
          : `${findings.length} violation(s), ${unreachable.length} etcd(s) unreachable`
    }`,
  );
  for (const r of j?.regions ?? [])
    lines.push(
      `  region ${String(r.name)}: bound to code ${String(r.code)}, cluster ${String(r.clusterId)}, revision ${String(r.revision)}, ${String(r.slots)} slot(s) read`,
    );
  for (const f of findings) lines.push(`  VIOLATION ${String(f.kind)}: ${String(f.message)}`);
  for (const u of unreachable) lines.push(`  UNREACHABLE: ${String(u)}`);
  if (j === undefined || (!ok && exitCode !== 1 && exitCode !== 3))
    for (const l of [...stdout, ...stderr].slice(-8)) lines.push(`  | ${l}`);
  return { exitCode, ok, lines };
}

/** Options of {@link runAudit}. */
export interface RunAuditOptions {
  /** `apps/cli/dist/main.js`. */
  readonly cliMain: string;
  /** Where the deployment file (`audit.json`) is written. */
  readonly dir: string;
  readonly regions: readonly AuditRegion[];
  /** `--timeout-ms` of the audit (each etcd's answer). */
  readonly timeoutMs: number;
}

/** Writes the deployment file, runs `idgen audit --config … --json` and judges its answer. */
export async function runAudit(o: RunAuditOptions): Promise<AuditOutcome> {
  const config = join(o.dir, 'audit.json');
  await writeFile(config, auditConfig(o.regions));
  const handle = spawnProcess(process.execPath, [
    o.cliMain,
    'audit',
    '--config',
    config,
    '--timeout-ms',
    String(o.timeoutMs),
    '--json',
  ]);
  // Bounded: the CLI's own timeout plus start-up; killed (and failed) past that.
  const limit = setTimeout(() => void handle.kill(), o.timeoutMs + 30_000);
  const exit = await handle.exited;
  clearTimeout(limit);
  return judgeAudit(exit.code, handle.stdoutLines, handle.stderrLines);
}
