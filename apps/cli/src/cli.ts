import { Command, CommanderError } from 'commander';
import { DEFAULT_LAYOUT } from '@idgen/core';
import { decodeId, layoutWithEpoch } from './decode.js';

/** Where the CLI writes; injectable so tests can read what it printed. */
export interface CliIo {
  out(line: string): void;
  err(line: string): void;
}

/** Exit codes: 0 ok, 2 bad usage or bad input (as DESIGN §6 says for an invalid ID). */
export const EXIT_OK = 0;
export const EXIT_USAGE = 2;

const defaultEpoch = new Date(DEFAULT_LAYOUT.epochMs).toISOString();

/** Builds the `idgen` command. Each verb sets `exitCode` rather than calling `process.exit`. */
export function buildProgram(io: CliIo, state: { exitCode: number }): Command {
  const program = new Command('idgen')
    .description(
      'idgen operator CLI: decode 64-bit IDs (timestamp | region | worker | sequence).\n' +
        'Verbs that talk to generator nodes and etcd (next, status, leases) come in later releases.',
    )
    .configureOutput({ writeOut: (s) => io.out(s.replace(/\n$/, '')), writeErr: (s) => io.err(s.replace(/\n$/, '')) })
    .exitOverride()
    .showHelpAfterError('(run idgen --help for usage)');

  program
    .command('decode')
    .description(
      'print the fields of each ID as one JSON object a line: id, timestampMs (since the epoch), time, region, worker, sequence',
    )
    .argument('<id...>', 'IDs in decimal (0 … 9223372036854775807)')
    .option('--epoch <instant>', 'epoch of the layout, ISO-8601 or Unix milliseconds', defaultEpoch)
    .addHelpText('after', '\nExample:\n  $ idgen decode 104148763141017605\n  {"id":"104148763141017605","timestampMs":24831000123,"time":"2024-10-14T09:30:00.123Z","region":2,"worker":17,"sequence":5}\n\nAn invalid ID prints one line on stderr and exits with code 2 (valid IDs before and after it are still printed).')
    .action((ids: string[], options: { epoch: string }) => {
      let layout;
      try {
        layout = layoutWithEpoch(options.epoch);
      } catch (e) {
        io.err(`idgen decode: ${(e as Error).message}`);
        state.exitCode = EXIT_USAGE;
        return;
      }
      for (const text of ids) {
        try {
          io.out(JSON.stringify(decodeId(text, layout)));
        } catch (e) {
          io.err(`idgen decode: ${(e as Error).message}`);
          state.exitCode = EXIT_USAGE;
        }
      }
    });
  return program;
}

/** Runs the CLI on `argv` (without `node` and the script); returns the exit code. */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const state = { exitCode: EXIT_OK };
  const program = buildProgram(io, state);
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) {
      // --help and --version end here with code 0; usage errors were already printed by commander.
      return e.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    io.err(`idgen: ${(e as Error).message}`);
    return 1;
  }
  return state.exitCode;
}
