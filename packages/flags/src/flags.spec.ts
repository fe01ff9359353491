import {
  FlagError,
  defineFlags,
  flag,
  integer,
  matching,
  oneOf,
  textFlags,
  yesNo,
  type FlagOutcome,
  type FlagValues,
} from './index.js';

const INFO = { name: 'tool', description: 'A tool.', envPrefix: 'TOOL_' };

const table = {
  count: flag('<n>', integer(1, 10), 'how many', '3'),
  mode: flag('<mode>', oneOf('fast', 'safe'), 'how', 'safe'),
  name: flag('<name>', matching(/^[a-z]+$/, 'lower-case letters'), 'who', { shown: 'the host name' }),
  dryRun: flag('', yesNo, 'change nothing'),
  output: flag('<where>', (t) => (t === '' ? 'nowhere' : t), 'where to', { value: 'stdout', emptyIsValue: true }),
  ...textFlags([
    { flags: '--db-url <url>', key: 'url', description: 'database' },
    { flags: '--db-user <name>', key: 'user', description: 'database user', defaultValue: 'admin' },
  ]),
};
const tool = defineFlags(INFO, table);

function values(argv: string[], env: Record<string, string> = {}): FlagValues {
  const outcome = tool.parse(argv, env);
  if (outcome.kind !== 'values') throw new Error(`expected values, got ${JSON.stringify(outcome)}`);
  return outcome.values;
}

function error(argv: string[], env: Record<string, string> = {}): string {
  const outcome: FlagOutcome = tool.parse(argv, env);
  if (outcome.kind !== 'error') throw new Error(`expected an error, got ${outcome.kind}`);
  return outcome.message;
}

describe('defineFlags', () => {
  it('names each flag and variable after its key', () => {
    expect(tool.specs.map((s) => [s.flags, s.env])).toEqual([
      ['--count <n>', 'TOOL_COUNT'],
      ['--mode <mode>', 'TOOL_MODE'],
      ['--name <name>', 'TOOL_NAME'],
      ['--dry-run', 'TOOL_DRY_RUN'],
      ['--output <where>', 'TOOL_OUTPUT'],
      ['--db-url <url>', 'TOOL_DB_URL'],
      ['--db-user <name>', 'TOOL_DB_USER'],
    ]);
  });

  it('reads the command line first, then a variable, then the default', () => {
    expect(values([]).value(table.count)).toBe(3);
    expect(values([], { TOOL_COUNT: '5' }).value(table.count)).toBe(5);
    expect(values(['--count', '7'], { TOOL_COUNT: '5' }).value(table.count)).toBe(7);
    expect(values(['--count', '7']).given(table.count)).toEqual({ value: '7', name: '--count' });
    expect(values([], { TOOL_COUNT: '5' }).given(table.count)).toEqual({ value: '5', name: 'TOOL_COUNT' });
    expect(values([]).given(table.count)).toEqual({ value: '3', name: '--count' });
  });

  it('treats an empty variable as unset, unless the flag takes empty as a value', () => {
    expect(values([], { TOOL_COUNT: '', TOOL_MODE: '' }).value(table.count)).toBe(3);
    expect(values([], { TOOL_OUTPUT: '' }).value(table.output)).toBe('nowhere');
    expect(values([]).value(table.output)).toBe('stdout');
  });

  it('gives a switch true when given, and reads 1, 0, true or false from its variable', () => {
    expect(values(['--dry-run']).value(table.dryRun)).toBe(true);
    expect(values([]).value(table.dryRun)).toBeUndefined();
    expect(values([], { TOOL_DRY_RUN: 'TRUE' }).value(table.dryRun)).toBe(true);
    expect(values([], { TOOL_DRY_RUN: '0' }).value(table.dryRun)).toBe(false);
    expect(error([], { TOOL_DRY_RUN: 'yes' })).toBe('TOOL_DRY_RUN must be 1 or 0, got "yes"');
  });

  it.each([
    [['--count', '0'], '--count must be an integer from 1 to 10, got "0"'],
    [['--count', '11'], '--count must be an integer from 1 to 10, got "11"'],
    [['--count', '1.5'], '--count must be an integer from 1 to 10, got "1.5"'],
    [['--count', '+1'], '--count must be an integer from 1 to 10, got "+1"'],
    [['--count', '1e1'], '--count must be an integer from 1 to 10, got "1e1"'],
    [['--count', '0x5'], '--count must be an integer from 1 to 10, got "0x5"'],
    [['--mode', 'FAST'], '--mode must be one of fast, safe, got "FAST"'],
    [['--name', 'Bob'], '--name must be lower-case letters, got "Bob"'],
    [['--bogus'], "unknown option '--bogus'"],
    [['--count'], "option '--count <n>' argument missing"],
    [['extra'], 'too many arguments. Expected 0 arguments but got 1: extra.'],
  ])('refuses %j: %s', (argv, message) => {
    expect(error(argv)).toBe(message);
  });

  it('names the variable a bad value came from, and reports the first bad flag in table order', () => {
    expect(error([], { TOOL_COUNT: 'lots' })).toBe('TOOL_COUNT must be an integer from 1 to 10, got "lots"');
    expect(error(['--name', 'X'], { TOOL_MODE: 'slow' })).toMatch(/^TOOL_MODE must be one of fast, safe/);
    // A number past 2^53 is not read as a nearby one.
    expect(error(['--count', '9007199254740993'])).toMatch(/^--count must be an integer/);
  });

  it('hands a package its flags under its own keys, each with the name it came by', () => {
    const v = values(['--db-url', 'pg://x'], { TOOL_DB_USER: 'app' });
    expect(v.named([{ flags: '--db-url <url>', key: 'url', description: '' }])).toEqual({
      url: { value: 'pg://x', name: '--db-url' },
    });
    expect(
      values([]).named([
        { flags: '--db-url <url>', key: 'url', description: '' },
        { flags: '--db-user <name>', key: 'user', description: '' },
      ]),
    ).toEqual({ user: { value: 'admin', name: '--db-user' } });
    // A flag the table does not have is a mistake in the tool, not a flag left out.
    expect(() => v.named([{ flags: '--db-host <host>', key: 'host', description: '' }])).toThrow(
      '--db-host <host> is not a flag of tool',
    );
  });

  it('reads a flag with a default with set(), and says which flag has neither value nor default', () => {
    expect(values([]).set(table.mode)).toBe('safe');
    expect(() => values([]).set(table.name)).toThrow('--name has no value and no default');
    expect(values([]).name(table.name)).toBe('--name');
    expect(values([], { TOOL_NAME: 'ann' }).name(table.name)).toBe('TOOL_NAME');
  });

  it('prints help with each flag, its variable, and its default or what happens without it', () => {
    const outcome = tool.parse(['--help'], {});
    expect(outcome.kind).toBe('help');
    const help = (outcome.kind === 'help' ? outcome.text : '').replace(/\s+/g, ' ');
    expect(help).toBe(tool.help().replace(/\s+/g, ' '));
    expect(help).toContain('--count <n> how many [TOOL_COUNT] (default: "3")');
    expect(help).toContain('--name <name> who [TOOL_NAME] (default: the host name)');
    expect(help).toContain('--dry-run change nothing [TOOL_DRY_RUN]');
    expect(help).toContain('the command line wins');
  });

  it('keeps errors a parser did not throw as FlagError out of the outcome', () => {
    const broken = defineFlags(INFO, {
      x: flag(
        '<x>',
        () => {
          throw new TypeError('a bug');
        },
        'a parser with a bug',
        '1',
      ),
    });
    expect(() => broken.parse([], {})).toThrow(TypeError);
    expect(new FlagError('m')).toBeInstanceOf(Error);
  });
});
