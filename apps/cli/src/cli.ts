import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command, CommanderError } from 'commander';
import { DEFAULT_LAYOUT } from '@idgen/core';
import type { SpareCodeRecord } from '@idgen/lease/records';
import type { CliIo, VerbContext } from './context.js';
import { decodeId, idReader, layoutWithEpoch, type IdReader } from './decode.js';
import { addFormatVerb, idsToRead } from './format.js';
import { runSpareInit, runSpareReconcile } from './spare-registry-verbs.js';
import {
  CliError,
  EXIT_CODES_HELP,
  EXIT_OK,
  EXIT_PROBLEM,
  EXIT_UNREACHABLE,
  EXIT_USAGE,
  isCliError,
  type ExitCode,
} from './exit-codes.js';
import { runAudit, runWhois, type AuditFlags } from './audit-verbs.js';
import { runLayout, type LayoutFlags } from './layout.js';
import { runLeases, type LeasesFlags } from './leases.js';
import { runNext, type NextFlags } from './next.js';
import {
  runRegionInit,
  runRegionRestored,
  runRegionShow,
  type RegionInitFlags,
  type RegionRestoredFlags,
} from './region.js';
import {
  addEnvironment,
  addEtcdOptions,
  addJsonOption,
  addNodeTlsOptions,
  addRegistryOptions,
  addTimeoutOption,
  type EtcdAccess,
  type EtcdFlags,
} from './options.js';
import { etcdAccessError } from './etcd-state.js';
import { runStatus, type StatusFlags } from './status.js';
import {
  readSpareNotes,
  runSpareAdopt,
  runSpareLend,
  runSpareList,
  runSpareReclaim,
  spareNote,
  type AdoptFlags,
  type LendFlags,
  type ReclaimFlags,
  type SpareFlags,
} from './spare.js';

export type { CliIo } from './context.js';
export { EXIT_OK, EXIT_PROBLEM, EXIT_UNREACHABLE, EXIT_USAGE } from './exit-codes.js';

const defaultEpoch = new Date(DEFAULT_LAYOUT.epochMs).toISOString();

/** The package's version (`idgen --version`), read from its package.json beside `dist/` and `src/`. */
function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(join(__dirname, '..', 'package.json'), 'utf8')) as { version?: unknown };
  return typeof pkg.version === 'string' ? pkg.version : 'unknown';
}

/** Options of {@link buildProgram} and {@link runCli}. */
export interface CliOptions {
  /** Wall clock in Unix ms; default `Date.now`. */
  readonly nowMs?: () => number;
}

/**
 * Builds the `idgen` command. Each verb stores its exit code in `state` rather than calling
 * `process.exit`; a verb's {@link CliError} becomes one line on stderr and its code.
 */
export function buildProgram(io: CliIo, state: { exitCode: number }, options: CliOptions = {}): Command {
  const ctx: VerbContext = { io, nowMs: options.nowMs ?? Date.now };
  const program = new Command('idgen')
    .description(
      "idgen operator CLI: IDs from a node, every node's status, the worker-slot leases and the layout in etcd, " +
        'and the fields of an ID (timestamp | region | worker | sequence). Tables for people, --json for scripts.',
    )
    .version(packageVersion(), '-V, --version', 'print the version of @idgen/cli')
    .configureOutput({ writeOut: (s) => io.out(s.replace(/\n$/, '')), writeErr: (s) => io.err(s.replace(/\n$/, '')) })
    .exitOverride()
    .showHelpAfterError('(run idgen --help for usage)')
    .addHelpText('after', `\n${EXIT_CODES_HELP}\n\nEach verb has its own --help (idgen status --help).`);

  const verb = verbRunner(ctx, state);

  addNextVerb(program, verb);
  addStatusVerb(program, verb);
  addLeasesVerb(program, verb);
  addLayoutVerb(program, verb);
  addRegionVerbs(program, verb);
  addSpareVerbs(program, verb);
  addAuditVerbs(program, verb);
  addDecodeVerb(program, io, state);
  addFormatVerb(program, io, state);
  return addEnvironment(program);
}

/** What {@link verbRunner} returns: wraps a verb's run function into a commander action. */
type VerbRunner = ReturnType<typeof verbRunner>;

/** `idgen next`: IDs from a node or from the region's serving nodes. */
function addNextVerb(program: Command, verb: VerbRunner): void {
  const next = program
    .command('next')
    .summary("print new IDs, one a line, from a node or from the region's serving nodes in etcd")
    .description(
      "print new IDs from a node (--server) or from the region's serving nodes found in etcd (--etcd --region), one a line",
    )
    .option('-n, --count <n>', 'how many IDs (1-65536)', '1')
    .option('--server <url>', 'one node: http://host:port (or host:port)')
    .option('--region <code>', 'with --etcd: the region whose serving nodes to ask');
  addNodeTlsOptions(next);
  addEtcdOptions(next, 'comma-separated etcd client URLs: ask the serving nodes of --region found there');
  addTimeoutOption(next, 'getting the IDs');
  addJsonOption(next)
    .addHelpText(
      'after',
      '\nExample:\n  $ idgen next -n 2 --etcd http://127.0.0.1:2379 --region 2\n  393162137190842368\n  393162137190842369\n\nExit 3 when no node answered within --timeout-ms (no ID is ever invented); 1 when a node refused the request.',
    )
    .action(verb<NextFlags>('next', runNext));
}

/** `idgen status`: every node's GetStatus in one table. */
function addStatusVerb(program: Command, verb: VerbRunner): void {
  const status = program
    .command('status')
    .summary("every node's GetStatus in one table; exit 1 if any node is not serving")
    .description(
      'GetStatus of one node (--server), or of every node etcd knows (--etcd [--region]: the nodes in discovery and ' +
        'the holders of worker slots): worker, state, fence reason, keep-alive age, clock state and offset, floor, ' +
        'last minted millisecond; exit 1 if any node is not serving',
    )
    .option('--server <url>', 'one node: http://host:port (or host:port)')
    .option('--region <code>', 'with --etcd: only this region (default: every region)');
  addNodeTlsOptions(status);
  addEtcdOptions(status, 'comma-separated etcd client URLs: ask every node in discovery or holding a worker slot');
  addTimeoutOption(status, 'etcd and each node');
  addJsonOption(status)
    .addHelpText('after', '\nA node that does not answer shows as "unreachable" (exit 1; with --server, exit 3).')
    .action(verb<StatusFlags>('status', runStatus));
}

/** `idgen leases`: every worker slot in etcd. */
function addLeasesVerb(program: Command, verb: VerbRunner): void {
  const leases = program
    .command('leases')
    .summary('every worker slot in etcd: holder, lease TTL left, last-ms, released; flags a poisoned last-ms')
    .description(
      'every worker slot with a holder or a last-ms record, read at one etcd revision: holder (node id, kind, address), ' +
        'lease TTL left, in discovery or not, last-ms and its age, released or not; flags a last-ms ahead of now',
    )
    .option('--region <code>', 'only this region (default: every region)');
  addEtcdOptions(leases, 'comma-separated etcd client URLs (required)');
  addTimeoutOption(leases, 'etcd');
  addJsonOption(leases)
    .addHelpText(
      'after',
      '\nFLAGS: "ahead" (last-ms up to one lease TTL ahead of this clock: a new holder waiting out an unclean\n' +
        "predecessor's floor records it), POISONED (further ahead: exit 1), corrupt (an unreadable record: exit 1).",
    )
    .action(verb<LeasesFlags>('leases', runLeases));
}

/** `idgen layout`: the layout record. */
function addLayoutVerb(program: Command, verb: VerbRunner): void {
  const layout = program
    .command('layout')
    .summary("the deployment's layout record in etcd")
    .description("the deployment's layout record in etcd (epoch and bit widths); exit 1 if there is none");
  addEtcdOptions(layout, 'comma-separated etcd client URLs (required)');
  addTimeoutOption(layout, 'etcd');
  addJsonOption(layout).action(verb<LayoutFlags>('layout', runLayout));
}

/** `idgen region init|restored|show`: the region binding (docs/design.md §5). */
function addRegionVerbs(program: Command, verb: VerbRunner): void {
  const region = program
    .command('region')
    .summary("bind a region's etcd to its region code, or show the binding (docs/design.md §5)")
    .description(
      "a region's etcd records which region code it serves ({prefix}/region, with etcd's cluster ID). Nodes, embedded\n" +
        'callers and idgen spare refuse an etcd that is unbound, bound to another code, or answering from another cluster.\n' +
        'init writes the binding once (idempotent); show prints it.',
    )
    .addHelpText('after', `\n${EXIT_CODES_HELP}`);
  const regionCommon = (
    c: ReturnType<Command['command']>,
    access: EtcdAccess = 'write',
  ): ReturnType<Command['command']> => {
    addEtcdOptions(c, "the region's etcd client URLs, comma-separated (required)", access);
    addTimeoutOption(c, 'each etcd request');
    return addJsonOption(c);
  };
  regionCommon(
    region
      .command('init')
      .summary("bind this etcd to a region code (once, before the region's first node starts)")
      .requiredOption('--region <code>', 'the region code this etcd serves (0-7)')
      .option(
        '--lease-ttl-ceiling <seconds>',
        'the longest lease TTL any holder of the deployment may use, pinned once (docs/design.md §5)',
        '6',
      )
      .option(
        '--config <file>',
        "the deployment file (idgen audit's): every region's etcd is read first; a code live in another cluster is refused",
      )
      .option(
        '--retire-etcd <urls>',
        'the code is live in another cluster of --config: its endpoints; it is retired and its holders fence',
      )
      .option(
        '--old-etcd-stopped',
        'the code is live in another cluster of --config: state that every member of it is stopped (docs/runbook.md)',
      )
      .option(
        '--sole-cluster',
        'no deployment file yet: state that no other etcd cluster of the deployment serves this code (an etcd not bound\n' +
          'yet needs --config or this)',
      ),
  )
    .addHelpText(
      'after',
      '\nExamples:\n  $ idgen region init --region 2 --etcd https://etcd.region-2:2379 --config deployment.json\n' +
        '  $ idgen region init --region 2 --etcd https://etcd.region-2:2379 --sole-cluster   # a first deployment, no file yet',
    )
    .action(verb<RegionInitFlags>('region init', runRegionInit));
  addRegistryOptions(
    regionCommon(
      region
        .command('restored')
        .summary('after an etcd restore: mark every slot unclean as of now and rebind to the restored cluster')
        .description(
          'after etcdctl snapshot restore (docs/runbook.md, "etcd restored from a snapshot"): every slot of the region\'s code\n' +
            'and of the spare codes lent to it gets last-ms = now, not released, so every next holder starts above now + TTL +\n' +
            "the clock bound, past anything the lost history's holders minted; then the binding takes the restored cluster's ID.",
        )
        .requiredOption('--region <code>', 'the region code this etcd serves (0-7)')
        .option('--lease-ttl <seconds>', 'the longest lease TTL the region runs with', '6')
        .option(
          '--lease-ttl-ceiling <seconds>',
          "the deployment's lease TTL ceiling, pinned here if the restored etcd has none (docs/design.md §5)",
        )
        .option(
          '--retire-etcd <urls>',
          "onto another cluster: the old cluster's endpoints; it is retired and its holders fence (same credentials)",
        )
        .option(
          '--old-etcd-stopped',
          'onto another cluster: state that every member of the old one is stopped (docs/runbook.md)',
        ),
    ),
    "the deployment's spare-code registry: each loan this etcd mirrors is confirmed there; one that moved on is sealed",
  ).action(verb<RegionRestoredFlags>('region restored', runRegionRestored));
  regionCommon(region.command('show').summary('the region binding this etcd records (exit 1 if none)'), 'read').action(
    verb<SpareFlags>('region show', runRegionShow),
  );
}

/** `idgen spare lend|reclaim|adopt|list` (docs/design.md §7). */
function addSpareVerbs(program: Command, verb: VerbRunner): void {
  const spare = program
    .command('spare')
    .summary('lend a spare region code to a region, reclaim it, and adopt it in a new region (docs/design.md §7)')
    .description(
      "spare region codes across regions' etcd clusters: lend (the borrowing region's etcd), reclaim (the same etcd: stop\n" +
        "claims, wait for every slot under the code to go, write the handover), adopt (the new region's etcd, before its\n" +
        "first node starts), list. Each of lend, reclaim and adopt is decided first in the deployment's spare-code registry\n" +
        '(--registry: one etcd every region agrees on, {registry-prefix}/spare-registry/{code}), then mirrored into the\n' +
        "region's etcd. They write: they need a user whose role may write {prefix}/spare-codes/ (adopt also\n" +
        '{prefix}/regions/{code}/last-ms/), and one that may write the registry. Procedure: docs/runbook.md\n' +
        '"Lending a spare region code".',
    )
    .addHelpText('after', `\n${EXIT_CODES_HELP}`);
  const spareCommon = (
    c: ReturnType<Command['command']>,
    etcdWhat: string,
    registryWhat = "the deployment's spare-code registry: its etcd client URLs, comma-separated (required)",
  ): ReturnType<Command['command']> => {
    addEtcdOptions(c, etcdWhat, c.name() === 'list' ? 'read' : 'write');
    addRegistryOptions(c, registryWhat);
    c.option(
      '--config <file>',
      c.name() === 'list'
        ? "optional: the deployment file (idgen audit's)"
        : "the deployment file (idgen audit's, required): every region's etcd is checked before the step writes",
    );
    addTimeoutOption(c, 'each etcd request');
    return addJsonOption(c);
  };
  const registryVerb = (c: ReturnType<Command['command']>): ReturnType<Command['command']> => {
    addRegistryOptions(c, "the deployment's spare-code registry: its etcd client URLs, comma-separated (required)");
    c.option('--config <file>', "the deployment file (idgen audit's, required): every region's etcd");
    addTimeoutOption(c, 'each etcd request');
    return addJsonOption(c);
  };
  registryVerb(
    spare
      .command('init')
      .summary("give the spare-code registry its deployment ID, once, and record it in every region's etcd")
      .description(
        'once per deployment, before the first lend: writes {registry-prefix}/spare-registry/deployment (a random ID;\n' +
          "run again it changes nothing), then records the registry (its etcd's cluster ID, prefix and that ID) and its\n" +
          "revision in every region's etcd of --config. From then on a region refuses any other registry (exit 4).\n" +
          '--loan-term pins how far each borrower\'s renewal carries a loan (docs/design.md §7, "Loan terms"): adopt waits\n' +
          'that long after a reclaim, and a borrowed slot outlives an unreachable registry by at most that.',
      )
      .option(
        '--loan-term <seconds>',
        "the deployment's loan term, pinned once: at least four times the longest TTL of a borrower",
        '600',
      ),
  )
    .addHelpText(
      'after',
      '\nExample:\n  $ idgen spare init --registry https://etcd.registry:2379 --config deployment.json',
    )
    .action(verb<SpareFlags>('spare init', runSpareInit));
  registryVerb(
    spare
      .command('reconcile')
      .summary("after the registry was restored: rebuild it from the regions' mirrors")
      .description(
        'after the registry etcd was restored from a backup (lend, reclaim and adopt exit 4: its history went back),\n' +
          "rebuilds each code's record from the most advanced mirror in the regions of --config, seals loans a later\n" +
          "step made dead, and sets every region's memory of the registry to its revision now (docs/runbook.md,\n" +
          '"Restoring the registry"). Refused when two regions borrow the same code.',
      ),
  )
    .addHelpText(
      'after',
      '\nExample:\n  $ idgen spare reconcile --registry https://etcd.registry:2379 --config deployment.json',
    )
    .action(verb<SpareFlags>('spare reconcile', runSpareReconcile));
  spareCommon(
    spare
      .command('lend')
      .argument('<code>', "the spare region code (the layout record's spareCodes; default 5, 6, 7)")
      .summary("record in a region's etcd that a spare code is lent to it")
      .description(
        "record in the borrowing region's etcd that <code> is lent to it ({prefix}/spare-codes/{code} = lent): its embedded\n" +
          'callers with borrowSpare claim slots under the code once their own range is full; their IDs carry the code',
      )
      .option('--to-region <region>', 'the borrowing region (its own code)'),
    "the borrowing region's etcd client URLs (required)",
  )
    .addHelpText(
      'after',
      '\nExample:\n  $ idgen spare lend 5 --to-region 2 --etcd https://etcd.region-2:2379 --registry https://etcd.registry:2379\n' +
        '  spare code 5: lent, lent to region 2\n\nRefused (exit 1) when the registry says the code is lent to another region, reclaimed or adopted.',
    )
    .action((code: string, flags: LendFlags) =>
      verb<LendFlags>('spare lend', (f, c) => runSpareLend(code, f, c))(flags),
    );
  spareCommon(
    spare
      .command('reclaim')
      .argument('<code>', 'the lent spare code')
      .summary('stop claims under a lent code, wait for its slots to go, write the handover file')
      .description(
        'in the etcd that lent <code>: mark it reclaiming (no new claims; holders give their slots back at their next\n' +
          'refresh), wait until every slot under it is released or expired, then write the handover (per worker, the\n' +
          "last-ms a new holder must mint above: a clean release's millisecond, else last-ms + TTL + clock bound) and\n" +
          'mark the code reclaimed. After --wait-ms with slots still held: exit 1; run it again to carry on.',
      )
      .option('--handover <file>', 'where to write the handover (JSON), for idgen spare adopt')
      .option('--wait-ms <ms>', 'how long to wait for the slots under the code to go', '60000')
      .option('--lease-ttl <seconds>', "the borrowers' lease TTL, for records that do not carry their own", '6')
      .option('--clock-bound-ms <ms>', 'the bound on clock differences between holders (docs/design.md §5)', '10'),
    'client URLs of the etcd that lent the code (required)',
  )
    .addHelpText(
      'after',
      '\nExample:\n  $ idgen spare reclaim 5 --handover code-5.json --etcd https://etcd.region-2:2379 --registry https://etcd.registry:2379',
    )
    .action((code: string, flags: ReclaimFlags) =>
      verb<ReclaimFlags>('spare reclaim', (f, c) => runSpareReclaim(code, f, c))(flags),
    );
  spareCommon(
    spare
      .command('adopt')
      .argument('<code>', 'the reclaimed spare code')
      .summary("write a handover into the new region's etcd, so its nodes may run on the code")
      .description(
        "in the new region's etcd, before its first node starts: write each worker's last-ms from the handover (never\n" +
          'lowering one there), then {prefix}/spare-codes/{code} = adopted. A node refuses to start on a spare code its\n' +
          'etcd has not adopted, or on one its etcd lent out.',
      )
      .option('--handover <file>', 'the file idgen spare reclaim wrote'),
    "the new region's etcd client URLs (required)",
  )
    .addHelpText(
      'after',
      '\nExample:\n  $ idgen spare adopt 5 --handover code-5.json --etcd https://etcd.region-6:2379 --registry https://etcd.registry:2379\n\n' +
        'Refused (exit 1) unless the registry says the code is reclaimed with this handover; the registry records this\n' +
        'etcd (cluster ID, prefix) as the one that adopted it, and refuses any other.',
    )
    .action((code: string, flags: AdoptFlags) =>
      verb<AdoptFlags>('spare adopt', (f, c) => runSpareAdopt(code, f, c))(flags),
    );
  spareCommon(
    spare
      .command('list')
      .summary("the spare codes, their records in this etcd and the slots held under each (and the registry's view)"),
    'etcd client URLs (required)',
    "optional: the deployment's spare-code registry; its record of each code is shown beside this etcd's",
  ).action(verb<SpareFlags>('spare list', runSpareList));
}

/** `idgen audit` and `idgen whois` over a deployment's etcds. */
function addAuditVerbs(program: Command, verb: VerbRunner): void {
  const audit = program
    .command('audit')
    .summary(
      "check a whole deployment's etcds: bindings, spare loans, tenures, last-ms, layouts; exit 1 on a violation",
    )
    .description(
      "reads every region's etcd listed in --config (each within --timeout-ms) and proves or refutes: each etcd bound\n" +
        '({prefix}/region) to a code no other etcd is bound to; each spare code lent, reclaiming or adopted in at most one\n' +
        'etcd; no two tenures of a slot overlapping in milliseconds (each starts above the one before and above the\n' +
        "compacted ones); no last-ms above what its slot's last tenure allowed; layout records equal; no tenure of a\n" +
        "holder's journal overlapping another holder's on its slot. One line per violation (docs/runbook.md,\n" +
        '"Auditing a deployment").',
    )
    .option(
      '--config <file>',
      'the deployment: {"regions": [{"name", "etcd": [urls], "prefix"?, "ca"?, "cert"?, "key"?, "user"?, "passwordFile"?}], "journals"?: [dirs]}',
    )
    .option(
      '--journal <dir>',
      "a holder's tenure journal (idgen-server --tenure-journal), a witness outside etcd; repeatable, added to the file's journals",
      (v: string, all: string[] = []) => [...all, v],
    );
  addEtcdOptions(audit, "instead of --config: one region's etcd client URLs");
  addTimeoutOption(audit, 'each etcd');
  addJsonOption(audit)
    .addHelpText(
      'after',
      '\nExample:\n  $ idgen audit --config deployment.json\n  audit: 5 of 5 region(s) read, 212 slot(s), 1840 tenure(s) on record: clean\n\n' +
        'Exit 0 clean, 1 a violation (each one line: VIOLATION <kind>: …), 2 bad usage or a bad --config, 3 an etcd did\n' +
        'not answer within --timeout-ms (the audit is then not a proof).',
    )
    .action(verb<AuditFlags>('audit', runAudit));

  const whois = program
    .command('whois')
    .summary('name the holder whose tenure covers an ID (node id, kind, lease, first/last ms, how it ended)')
    .description(
      "decodes <id> (region, worker, millisecond) with the deployment's layout and names the tenure on record that\n" +
        'covers that millisecond on that slot; exit 1 when none does (or, never expected, more than one)',
    )
    .argument('<id>', 'an ID in decimal, or hex with 0x')
    .option('--config <file>', 'the deployment file of idgen audit');
  addEtcdOptions(whois, "instead of --config: one region's etcd client URLs");
  addTimeoutOption(whois, 'each etcd');
  addJsonOption(whois).action((id: string, flags: AuditFlags) =>
    verb<AuditFlags>('whois', (f, c) => runWhois(id, f, c))(flags),
  );
}

/** `idgen decode`: the fields of each ID. */
function addDecodeVerb(program: Command, io: CliIo, state: { exitCode: number }): void {
  const decode = program
    .command('decode')
    .summary('print the fields of each ID as one JSON object a line')
    .description(
      'print the fields of each ID as one JSON object a line: id, timestampMs (since the epoch), time, region, worker, sequence',
    )
    .argument(
      '[id...]',
      'IDs in decimal (0 … 9223372036854775807) or hex with 0x, or in a form (13-character base32, 19-digit\n' +
        'zero-padded decimal; spread and keyed with --from); none: read them from stdin, separated by whitespace',
    )
    .option('--epoch <instant>', 'epoch of the layout, ISO-8601 or Unix milliseconds', defaultEpoch)
    .option(
      '--from <form>',
      'the form the IDs are in: plain, base32, decimal, spread, keyed (default: by their shape; the output names it)',
    )
    .option('--key-file <file>', "the keyed form's key (32–128 hex digits): integers are then read as keyed IDs");
  addEtcdOptions(
    decode,
    'optional: an etcd whose spare-code records to show ("code 5, lent to region 2" in a field spare)',
  );
  addTimeoutOption(decode, 'etcd')
    .addHelpText(
      'after',
      '\nExample:\n  $ idgen decode 104148763141017605\n  {"id":"104148763141017605","timestampMs":24831000123,"time":"2024-10-14T09:30:00.123Z","region":2,"worker":17,"sequence":5}\n' +
        '  $ idgen decode 02WG2QY7D2405\n  {"id":"104148763141017605","form":"base32","timestampMs":24831000123,…}\n\nAn invalid ID prints one line on stderr and exits with code 2 (valid IDs before and after it are still printed).',
    )
    .action((args: string[], flags: DecodeFlags) => runDecode(args, flags, io, state));
}

/** The flags of `idgen decode`. */
type DecodeFlags = { epoch: string; from?: string; keyFile?: string } & EtcdFlags & { timeoutMs: string };

/** `idgen decode`'s action: IDs from the arguments or stdin, one JSON object a line; exit 2 on an invalid one. */
async function runDecode(args: string[], flags: DecodeFlags, io: CliIo, state: { exitCode: number }): Promise<void> {
  let layout;
  let reader: IdReader;
  try {
    layout = layoutWithEpoch(flags.epoch);
    reader = idReader(flags, 'keyed-with-key', layout);
  } catch (e) {
    io.err(`idgen decode: ${(e as Error).message}`);
    state.exitCode = EXIT_USAGE;
    return;
  }
  const ids = await idsToRead(args, 'decode', io);
  if (ids === undefined) {
    state.exitCode = EXIT_USAGE;
    return;
  }
  let notes: Map<number, SpareCodeRecord> | undefined;
  if (flags.etcd !== undefined) {
    try {
      const read = await readSpareNotes(flags);
      notes = read.notes;
      for (const p of read.problems) io.err(`idgen decode: ${p}`);
    } catch (e) {
      if (!isCliError(e)) throw e;
      io.err(`idgen decode: ${e.message}`);
      state.exitCode = e.exitCode;
      return;
    }
  }
  for (const text of ids) {
    try {
      const decoded = decodeId(text, layout, reader);
      const note = notes?.get(decoded.region);
      io.out(JSON.stringify(note === undefined ? decoded : { ...decoded, spare: spareNote(note) }));
    } catch (e) {
      io.err(`idgen decode: ${(e as Error).message}`);
      state.exitCode = EXIT_USAGE;
    }
  }
}

/**
 * How long past its own deadlines a verb may run before the CLI gives up on it: a library call that ignored its
 * deadline (etcd3's reconnects, grpc-js handshakes) must not hold the command: every verb
 * exits.
 */
export const DEADLINE_GRACE_MS = 1000;

/** The verbs whose `--timeout-ms` bounds each etcd request, not the whole command. */
const WRITING_VERBS = /^(region (init|restored)|spare (lend|reclaim|adopt|init|reconcile))$/;

/**
 * A reading verb's whole budget: the command timeout, two dial timeouts (etcd's, then a node's: `status` dials a node
 * that failed to say why) and {@link DEADLINE_GRACE_MS}.
 */
function budgetMs(flags: { timeoutMs?: unknown; dialTimeoutMs?: unknown }): number | undefined {
  if (flags.timeoutMs === undefined) return undefined;
  const n = (v: unknown): number => (typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : 0);
  return n(flags.timeoutMs) + 2 * n(flags.dialTimeoutMs) + DEADLINE_GRACE_MS;
}

/**
 * Runs a verb: its exit code, or its CliError's as one line on stderr (with `--json`, every stderr line is a JSON
 * object: `{"verb","error"}`, and the one that ends the verb also `"exitCode"`). A verb still running after its
 * budget ({@link budgetMs}) ends with exit 3 and one line, whatever it waits for.
 */
function verbRunner(ctx: VerbContext, state: { exitCode: number }) {
  return <F>(name: string, run: (flags: F, ctx: VerbContext) => Promise<ExitCode>) =>
    async (flags: F): Promise<void> => {
      const json = (flags as { json?: unknown }).json === true;
      const line = (message: string, exitCode?: number): string =>
        json
          ? JSON.stringify({ verb: name, error: message, ...(exitCode === undefined ? {} : { exitCode }) })
          : `idgen ${name}: ${message}`;
      const io: CliIo = json ? { ...ctx.io, err: (l) => ctx.io.err(line(l.replace(/^idgen [a-z ]+: /, ''))) } : ctx.io;
      // A verb that writes (region init|restored, spare lend|reclaim|adopt) is not cut halfway: each of its etcd
      // requests has --timeout-ms as its deadline, and etcd3's own calls theirs (createEtcdClient's callTimeoutMs).
      const budget = WRITING_VERBS.test(name) ? undefined : budgetMs(flags as Record<string, unknown>);
      let timer: NodeJS.Timeout | undefined;
      try {
        const ran = run(flags, { ...ctx, io });
        state.exitCode = await (budget === undefined
          ? ran
          : Promise.race([
              ran,
              new Promise<never>((_, reject) => {
                timer = setTimeout(
                  () =>
                    reject(
                      new CliError(
                        EXIT_UNREACHABLE,
                        `no answer within ${budget} ms (its timeouts and ${DEADLINE_GRACE_MS} ms)`,
                      ),
                    ),
                  budget,
                );
              }),
            ]));
      } catch (caught) {
        // An etcd refusal that reached here without a verb's own wording: said as the node says it, not raw gRPC.
        const e = isCliError(caught) ? caught : etcdAccessError(caught);
        if (e === undefined) throw caught;
        ctx.io.err(line(e.message, e.exitCode));
        state.exitCode = e.exitCode;
      } finally {
        clearTimeout(timer);
      }
    };
}

/** Runs the CLI on `argv` (without `node` and the script); returns the exit code. */
export async function runCli(argv: string[], io: CliIo, options: CliOptions = {}): Promise<number> {
  const state = { exitCode: EXIT_OK };
  const program = buildProgram(io, state, options);
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) {
      // --help and --version end here with code 0; usage errors were already printed by commander.
      return e.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    io.err(`idgen: ${(e as Error).message}`);
    return EXIT_PROBLEM;
  }
  return state.exitCode;
}
