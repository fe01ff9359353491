/**
 * Flags from the command line and `IDGEN_*` environment variables, for idgen's tools (`idgen-server`): a table of
 * typed flags, read with the command line first, then the environment, then defaults; one-line errors that name
 * the flag or the variable a bad value came from; help that lists each flag's variable and default.
 */
export { FlagError, defineFlags, flag, integer, matching, oneOf, refuse, text, textFlags, yesNo } from './flags.js';
export type {
  CommandInfo,
  FlagDef,
  FlagDoc,
  FlagOutcome,
  FlagSet,
  FlagSpec,
  FlagValues,
  NamedValue,
  Parser,
} from './flags.js';
