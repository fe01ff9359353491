import { EXIT_OK, EXIT_PROBLEM, type ExitCode } from './exit-codes.js';
import type { VerbContext } from './context.js';
import { openEtcdReader } from './etcd-state.js';
import { deadlines, etcdConnection, type EtcdFlags } from './options.js';
import { renderTable } from './table.js';

/** Flags of `idgen layout`. */
export interface LayoutFlags extends EtcdFlags {
  timeoutMs: string;
  json: boolean;
}

/** `idgen layout`: the deployment's layout record (`{prefix}/layout`, docs/design.md §1, §5). Exit 1 if absent or unreadable. */
export async function runLayout(flags: LayoutFlags, ctx: VerbContext): Promise<ExitCode> {
  const reader = await openEtcdReader(etcdConnection(flags), deadlines(flags));
  let snapshot;
  try {
    // Region [] : only the layout record is wanted, no slot is enumerated.
    snapshot = await reader.snapshot([]);
  } finally {
    reader.close();
  }
  const record = snapshot.layoutRecord;
  if (record === undefined) {
    ctx.io.err(`idgen layout: ${snapshot.layoutProblem ?? 'no layout record'}`);
    return EXIT_PROBLEM;
  }
  const layout = snapshot.layout;
  if (flags.json) {
    ctx.io.out(
      JSON.stringify({
        ...record,
        epoch: new Date(record.epochMs).toISOString(),
        maxRegion: layout.maxRegion,
        maxWorker: layout.maxWorker,
        spareCodes: snapshot.layoutSpareCodes,
      }),
    );
  } else {
    const rows = [
      ['epoch', `${new Date(record.epochMs).toISOString()} (${record.epochMs} Unix ms)`],
      ['timestamp', `${record.timestampBits} bits`],
      ['region', `${record.regionBits} bits (codes 0-${layout.maxRegion})`],
      ['worker', `${record.workerBits} bits (slots 0-${layout.maxWorker} a region)`],
      ['sequence', `${record.sequenceBits} bits (${2 ** record.sequenceBits} IDs a millisecond a worker)`],
      [
        'spare codes',
        snapshot.layoutSpareCodes.length === 0
          ? 'none'
          : `${snapshot.layoutSpareCodes.join(', ')} (held for new regions; loans: idgen spare list)`,
      ],
    ];
    for (const line of renderTable(['FIELD', 'VALUE'], rows)) ctx.io.out(line);
  }
  return EXIT_OK;
}
