import type { Command } from 'commander';
import { ID_FORMS, isIdForm } from '@idgen/core';
import type { CliIo } from './context.js';
import { idReader, readIdText, type IdReader } from './decode.js';
import { EXIT_USAGE } from './exit-codes.js';

/** The flags of `idgen format`. */
interface FormatFlags {
  to: string;
  from?: string;
  keyFile?: string;
}

/**
 * The IDs of a verb that reads them (`decode`, `format`): its arguments, else whitespace-separated on stdin; `undefined`
 * after printing the one-line reason when there are none.
 */
export async function idsToRead(args: string[], verb: string, io: CliIo): Promise<string[] | undefined> {
  if (args.length > 0) return args;
  const input = io.readStdin === undefined ? undefined : await io.readStdin();
  if (input === undefined) {
    io.err(`idgen ${verb}: give IDs as arguments or on stdin (idgen ${verb} --help)`);
    return undefined;
  }
  const ids = input.split(/\s+/).filter((t) => t !== '');
  if (ids.length === 0) io.err(`idgen ${verb}: no IDs on stdin`);
  return ids.length === 0 ? undefined : ids;
}

/** `idgen format --to <form>`: each ID in another form (docs/design.md §1 "Forms"). */
export function addFormatVerb(program: Command, io: CliIo, state: { exitCode: number }): void {
  program
    .command('format')
    .summary('print each ID in another form: base32, decimal (zero-padded), spread or keyed')
    .description(
      'print each ID in another form, one a line: base32 (13 characters, sorts as text), decimal (19 digits,\n' +
        'zero-padded, sorts as text), spread (fast-changing bits first, for range-sharded stores) or keyed (hides time\n' +
        'and sequence; needs --key-file). The IDs may be given in any form, read as idgen decode reads them.',
    )
    .argument('[id...]', 'IDs in any form (as idgen decode); none: read them from stdin, separated by whitespace')
    .requiredOption('--to <form>', `the form to print: ${ID_FORMS.join(', ')}`)
    .option('--from <form>', 'the form the IDs are in: plain, base32, decimal, spread, keyed (default: by their shape)')
    .option('--key-file <file>', "the keyed form's key: a file holding 32–128 hex digits")
    .addHelpText(
      'after',
      '\nExamples:\n  $ idgen format --to base32 104148763141017605\n  02WG2QY7D2405\n' +
        '  $ idgen format --to decimal 02WG2QY7D2405\n  0104148763141017605\n\n' +
        'An invalid ID prints one line on stderr and exits with code 2 (valid IDs before and after it are still printed).',
    )
    .action((args: string[], flags: FormatFlags) => runFormat(args, flags, io, state));
}

async function runFormat(args: string[], flags: FormatFlags, io: CliIo, state: { exitCode: number }): Promise<void> {
  const to = flags.to;
  let reader: IdReader;
  try {
    if (!isIdForm(to)) throw new RangeError(`--to ${JSON.stringify(to)} is not a form: give ${ID_FORMS.join(', ')}`);
    reader = idReader(flags, 'plain');
    if (to === 'keyed' && !reader.forms.hasKey)
      throw new RangeError('--to keyed needs the deployment key: give --key-file');
  } catch (e) {
    io.err(`idgen format: ${(e as Error).message}`);
    state.exitCode = EXIT_USAGE;
    return;
  }
  const ids = await idsToRead(args, 'format', io);
  if (ids === undefined) {
    state.exitCode = EXIT_USAGE;
    return;
  }
  for (const text of ids) {
    try {
      io.out(String(reader.forms.format(readIdText(text, reader).id, to)));
    } catch (e) {
      io.err(`idgen format: ${(e as Error).message}`);
      state.exitCode = EXIT_USAGE;
    }
  }
}
