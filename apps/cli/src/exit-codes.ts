/**
 * The exit codes of `idgen`, for scripts (stated in `idgen --help` and apps/cli/README.md):
 * - 0: done, and everything asked about is fine;
 * - 1: done, and a problem was found: a node is not serving (or none is), a `last-ms` record is poisoned
 *   or corrupt, no layout record, or a node refused the request;
 * - 2: bad usage or invalid input (an unknown flag, a bad URL, an invalid ID), before any I/O;
 * - 3: could not reach etcd, or (with `--server`) the node, within `--dial-timeout-ms` or `--timeout-ms`; a verb
 *   still running after both (plus a small grace) ends with this code too;
 * - 4: the spare-code registry is refused (`idgen spare lend|reclaim|adopt`): never initialised, not the registry the
 *   regions follow, its history went back (restored), or a region's mirror contradicts the step; nothing was written
 *   (docs/runbook.md "Restoring the registry").
 */
export const EXIT_OK = 0;
export const EXIT_PROBLEM = 1;
export const EXIT_USAGE = 2;
export const EXIT_UNREACHABLE = 3;
export const EXIT_REGISTRY = 4;

/** An exit code of {@link EXIT_OK} … {@link EXIT_REGISTRY}. */
export type ExitCode =
  typeof EXIT_OK | typeof EXIT_PROBLEM | typeof EXIT_USAGE | typeof EXIT_UNREACHABLE | typeof EXIT_REGISTRY;

/** What `idgen --help` prints about exit codes. */
export const EXIT_CODES_HELP =
  'Exit codes:\n' +
  '  0  ok: every node asked is serving, no problem found\n' +
  '  1  a node or slot is not serving (or no node is), or a problem was found (poisoned or corrupt last-ms,\n' +
  '     no layout record), or a node refused the request\n' +
  '  2  bad usage or invalid input (unknown flag, bad URL, invalid ID), before any I/O\n' +
  '  3  could not reach etcd, or the node given with --server, within --dial-timeout-ms / --timeout-ms\n' +
  '  4  spare lend/reclaim/adopt: the spare-code registry is refused (not initialised, not the one the regions\n' +
  '     follow, its history went back, or a region mirrors the code otherwise); nothing written';

const CLI_ERROR = Symbol.for('@idgen/cli/CliError');

/** A verb's failure: one line on stderr and an exit code. */
export class CliError extends Error {
  readonly [CLI_ERROR] = true;
  constructor(
    readonly exitCode: ExitCode,
    message: string,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** Brand check (not `instanceof`, which two copies of the package would break). */
export function isCliError(e: unknown): e is CliError {
  return typeof e === 'object' && e !== null && (e as { [CLI_ERROR]?: unknown })[CLI_ERROR] === true;
}

/** A usage error: exit code 2. */
export function usageError(message: string): CliError {
  return new CliError(EXIT_USAGE, message);
}
