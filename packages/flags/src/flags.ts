import type { FlagDoc, NamedValue } from '@idgen/core';
import { Command, CommanderError, Option } from 'commander';

/** A bad flag value, or flags that do not go together: the message is one line that names the flag or variable. */
export class FlagError extends Error {
  override readonly name = 'FlagError';
}

/**
 * Reads a flag's text (given, defaulted, or from its variable) into a value; a bad text throws a {@link FlagError}
 * that names `from`, the flag (`--region`) or the variable that set it (`IDGEN_REGION`).
 */
export type Parser<T> = (text: string, from: string) => T;

/** Throws `<from> must be <what>, got "<text>"`. */
export function refuse(from: string, what: string, text: string): never {
  throw new FlagError(`${from} must be ${what}, got ${JSON.stringify(text)}`);
}

/** The text as given. */
export const text: Parser<string> = (t) => t;

/** A decimal integer from `min` to `max` (no sign, fraction, exponent or separator). */
export const integer =
  (min: number, max: number): Parser<number> =>
  (t, from) => {
    const n = /^\d+$/.test(t.trim()) ? Number(t.trim()) : NaN;
    return Number.isSafeInteger(n) && n >= min && n <= max ? n : refuse(from, `an integer from ${min} to ${max}`, t);
  };

/** One of `values`, exactly. */
export const oneOf =
  <T extends string>(...values: T[]): Parser<T> =>
  (t, from) =>
    values.find((v) => v === t) ?? refuse(from, `one of ${values.join(', ')}`, t);

/** Text that `pattern` matches; `what` says what it must be. */
export const matching =
  (pattern: RegExp, what: string): Parser<string> =>
  (t, from) =>
    pattern.test(t) ? t : refuse(from, what, t);

/** A switch: given with no argument it is `1`; a variable says 1, 0, true or false. */
export const yesNo: Parser<boolean> = (t, from) => {
  const v = t.trim().toLowerCase();
  return v === '1' || v === 'true' ? true : v === '0' || v === 'false' ? false : refuse(from, '1 or 0', t);
};

/** One flag of a table: its argument, how its text is read, its help, and its default. */
export interface FlagDef<T> {
  /** `<code>`; empty for a switch. */
  readonly arg: string;
  readonly parse: Parser<T>;
  readonly description: string;
  /** The default's text, read by `parse` like a given one. */
  readonly value?: string | undefined;
  /** What happens without the flag, when that is not a value (shown as the default in the help). */
  readonly shown?: string;
  /** An empty variable is a value of this flag (for example "off"), not unset. */
  readonly emptyIsValue?: boolean;
}

/** A flag for a table; `more` is its default's text, or the optional parts. */
export function flag<T>(
  arg: string,
  parse: Parser<T>,
  description: string,
  more: string | Omit<Partial<FlagDef<T>>, 'arg' | 'parse' | 'description'> = {},
): FlagDef<T> {
  return { arg, parse, description, ...(typeof more === 'string' ? { value: more } : more) };
}

// FlagDoc and NamedValue are the core's (one home for the contract packages and tools share).
export type { FlagDoc, NamedValue };

/** A package's flags as text flags of a table, keyed by their names in camelCase; the package checks the values. */
export function textFlags(docs: readonly FlagDoc[]): Record<string, FlagDef<string>> {
  return Object.fromEntries(
    docs.map((d) => [
      camelCase(d.flags),
      flag(d.flags.split(' ')[1] ?? '', text, d.description, { value: d.defaultValue }),
    ]),
  );
}

/** `--etcd-ca <file>` → `etcdCa`. */
function camelCase(flags: string): string {
  return (flags.split(' ')[0] ?? '').slice(2).replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** A flag as the help and commander see it. */
export interface FlagSpec {
  /** Commander's syntax: `--region <code>`. */
  readonly flags: string;
  /** The flag's name in camelCase, its key in the table. */
  readonly key: string;
  /** The variable: the prefix, then the name in capitals (`IDGEN_REGION`). */
  readonly env: string;
  readonly description: string;
  readonly defaultValue?: string;
  readonly defaultDescription?: string;
}

/** The values read from a command line and environment. */
export interface FlagValues {
  /** A flag's value; `undefined` when it was not given and has no default. */
  value<T>(flag: FlagDef<T>): T | undefined;
  /** The value of a flag with a default: always there. */
  set<T>(flag: FlagDef<T>): T;
  /** The text and the name it came by (to name it in an error); `undefined` when not given and no default. */
  given(flag: FlagDef<unknown>): NamedValue | undefined;
  /** How a flag is named in errors: as given, or the flag itself. */
  name(flag: FlagDef<unknown>): string;
  /** A package's flags ({@link textFlags}) as it takes them: its keys, each given value with its name. */
  named(docs: readonly FlagDoc[]): Record<string, NamedValue>;
}

/** What reading a command line came to. */
export type FlagOutcome =
  | { readonly kind: 'values'; readonly values: FlagValues }
  | { readonly kind: 'help'; readonly text: string }
  | { readonly kind: 'error'; readonly message: string };

/** The flags of one command, each also a variable. */
export interface FlagSet {
  readonly specs: readonly FlagSpec[];
  help(): string;
  /**
   * Reads `argv` and `env`: the command line wins, a non-empty variable fills a flag not given on it, then the
   * default. Each text is read by its flag's parser in the table's order; the first bad one is the error.
   */
  parse(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): FlagOutcome;
}

/** The command's name and description, and the prefix of its variables (`IDGEN_`). */
export interface CommandInfo {
  readonly name: string;
  readonly description: string;
  readonly envPrefix: string;
}

/**
 * A command's flags from a table keyed by their names in camelCase (`maxCount` is `--max-count` and
 * `IDGEN_MAX_COUNT`), in help order.
 */
export function defineFlags(info: CommandInfo, table: Readonly<Record<string, FlagDef<unknown>>>): FlagSet {
  const entries = Object.entries(table).map(([key, def]) => {
    const name = key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
    const spec: FlagSpec = {
      flags: `--${name}${def.arg === '' ? '' : ` ${def.arg}`}`,
      key,
      env: `${info.envPrefix}${name.toUpperCase().replace(/-/g, '_')}`,
      description: def.description,
      ...(def.value === undefined ? {} : { defaultValue: def.value }),
      ...(def.shown === undefined ? {} : { defaultDescription: def.shown }),
    };
    return { spec, def };
  });
  const command = (): Command => {
    const c = new Command(info.name)
      .description(
        `${info.description}\nEvery flag can also be set by the environment variable named in brackets; the command line wins.`,
      )
      .helpOption('-h, --help', 'print this help and exit')
      .allowExcessArguments(false)
      .configureHelp({ helpWidth: 120 })
      .exitOverride()
      // The caller prints errors (one line) and the help.
      .configureOutput({ writeOut: () => undefined, writeErr: () => undefined, outputError: () => undefined });
    for (const { spec } of entries) {
      // Flags without a fixed default say what happens without them; commander prints only real defaults.
      const fallback = spec.defaultDescription !== undefined ? ` (default: ${spec.defaultDescription})` : '';
      const option = new Option(spec.flags, `${spec.description} [${spec.env}]${fallback}`);
      if (spec.defaultValue !== undefined) option.default(spec.defaultValue);
      c.addOption(option);
    }
    return c;
  };
  const byKey = new Map(entries.map(({ spec, def }) => [spec.key, def]));
  return {
    specs: entries.map((e) => e.spec),
    help: () => command().helpInformation(),
    parse(argv, env) {
      const c = command();
      try {
        c.parse([...argv], { from: 'user' });
      } catch (e) {
        if (!(e instanceof CommanderError)) throw e;
        if (e.code === 'commander.helpDisplayed' || e.code === 'commander.help')
          return { kind: 'help', text: c.helpInformation() };
        return { kind: 'error', message: e.message.replace(/^error: /, '') };
      }
      const opts = c.opts<Record<string, string | boolean | undefined>>();
      const read = new Map<FlagDef<unknown>, { value: unknown; given: NamedValue }>();
      try {
        for (const { spec, def } of entries) {
          const envText = env[spec.env];
          const fromEnv =
            c.getOptionValueSource(spec.key) !== 'cli' &&
            envText !== undefined &&
            (envText !== '' || def.emptyIsValue === true);
          const option = opts[spec.key];
          const raw = fromEnv ? envText : option === true ? '1' : option === false ? undefined : option;
          const name = fromEnv ? spec.env : (spec.flags.split(' ')[0] ?? spec.key);
          if (raw !== undefined) read.set(def, { value: def.parse(raw, name), given: { value: raw, name } });
        }
      } catch (e) {
        if (e instanceof FlagError) return { kind: 'error', message: e.message };
        throw e;
      }
      const flagName = (d: FlagDef<unknown>): string =>
        entries.find((e) => e.def === d)?.spec.flags.split(' ')[0] ?? 'the flag';
      const values: FlagValues = {
        value: <T>(d: FlagDef<T>) => read.get(d)?.value as T | undefined,
        set<T>(d: FlagDef<T>): T {
          if (!read.has(d)) throw new Error(`${flagName(d)} has no value and no default`);
          return read.get(d)?.value as T;
        },
        given: (d) => read.get(d)?.given,
        name: (d) => read.get(d)?.given.name ?? flagName(d),
        named: (docs) =>
          Object.fromEntries(
            docs.flatMap((doc) => {
              const def = byKey.get(camelCase(doc.flags));
              if (def === undefined) throw new Error(`${doc.flags} is not a flag of ${info.name}`);
              const given = read.get(def)?.given;
              return given === undefined ? [] : [[doc.key, given]];
            }),
          ),
      };
      return { kind: 'values', values };
    },
  };
}
