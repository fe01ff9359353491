// Lint for every project. The layering is enforced here, not just declared (docs/style.md "Layers"):
//   type:core    depends on nothing
//   type:lib     depends on core and libs (and the test harness, for its specs)
//   type:app     composes core and libs; nothing depends on an app
//   type:tool    benchmarks, chaos: anything but apps (which they start as processes, never import)
// Who may install what (tags `scope:*`; a project without one is not constrained by them):
//   scope:client  what a caller installs (@idgen/client, @idgen/discovery, @idgen/embedded): never depends on
//                 scope:server; discovery and embedded build on scope:shared (the lease; embedded also the guard)
//   scope:shared  the ID layout, the API, the lease and the clock guard (the server and embedded callers
//                 use them alike): depends on neither scope:client nor scope:server
//   scope:server  the generator node and what only it uses (@idgen/serving, @idgen/h2, @idgen/flags), the CLI
// Packages may use only the OpenTelemetry API; the SDK and exporters belong to apps.
import nx from '@nx/eslint-plugin';
import jest from 'eslint-plugin-jest';

const sdkOnlyInApps = ['@opentelemetry/sdk-*', '@opentelemetry/exporter-*', '@opentelemetry/resources'];

export default [
  ...nx.configs['flat/base'],
  ...nx.configs['flat/typescript'],
  {
    ignores: ['**/dist', '**/node_modules', '**/src/gen/**', '**/coverage', '**/*.js', '**/*.mjs', '**/*.cjs'],
  },
  {
    // Type-aware rules (typescript-eslint's project service finds each file's tsconfig): a promise nobody awaits
    // or catches is an unhandled rejection waiting to happen (a crash on Node >= 15), and imports used only as
    // types say so, so the JavaScript that ships never loads a module for a type.
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
    },
  },
  {
    files: ['**/*.ts'],
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          allow: [],
          depConstraints: [
            {
              sourceTag: 'type:core',
              onlyDependOnLibsWithTags: ['type:core'],
              notDependOnLibsWithTags: ['type:lib', 'type:app', 'type:tool', 'type:testing'],
            },
            {
              sourceTag: 'type:lib',
              onlyDependOnLibsWithTags: ['type:core', 'type:lib', 'type:testing'],
              bannedExternalImports: sdkOnlyInApps,
            },
            {
              sourceTag: 'type:testing',
              onlyDependOnLibsWithTags: ['type:core', 'type:lib', 'type:testing'],
              bannedExternalImports: sdkOnlyInApps,
            },
            { sourceTag: 'type:app', onlyDependOnLibsWithTags: ['type:core', 'type:lib', 'type:testing'] },
            {
              sourceTag: 'type:tool',
              onlyDependOnLibsWithTags: ['type:core', 'type:lib', 'type:testing', 'type:tool'],
            },
            { sourceTag: 'scope:client', notDependOnLibsWithTags: ['scope:server'] },
            { sourceTag: 'scope:shared', notDependOnLibsWithTags: ['scope:client', 'scope:server'] },
          ],
        },
      ],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-restricted-syntax': [
        'error',
        {
          selector: 'ExportAllDeclaration',
          message: 'Name each export (docs/style.md "Public surface": no `export *`).',
        },
        {
          selector: 'CallExpression[callee.object.name=/^(it|test|describe)$/][callee.property.name=/^(skip|only)$/]',
          message: 'No skipped or focused tests on main.',
        },
      ],
    },
  },
  {
    // The core is pure (docs/design.md §2): no I/O, no clock, no dependency. Its specs may read the vectors.
    files: ['packages/core/src/**/*.ts'],
    // system-clock.ts is the one definition of the real clocks that the packages share (docs/style.md "Layers"); the
    // rule below keeps every other core file from reading it.
    ignores: ['**/*.spec.ts', 'packages/core/src/system-clock.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: '^(?!\\.)', message: '@idgen/core imports nothing but its own files.' },
            {
              regex: 'system-clock',
              message: 'The core keeps no clock: time is an argument (only index.ts exports it).',
            },
          ],
        },
      ],
      'no-restricted-globals': [
        'error',
        { name: 'performance', message: 'The core keeps no clock: time is an argument.' },
        { name: 'process', message: 'The core does no I/O.' },
      ],
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'The core keeps no clock: time is an argument.' },
      ],
    },
  },
  {
    // The core's entry point re-exports the real clocks for the packages; no other core file imports them.
    files: ['packages/core/src/index.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ regex: '^(?!\\.)', message: '@idgen/core imports nothing but its own files.' }] },
      ],
    },
  },
  {
    // Every test asserts (docs/style.md "Tests"): eslint-plugin-jest's expect-expect, with the project's assertion
    // helpers named, so a test whose checks all live in a helper still counts and one with none fails lint.
    files: ['**/*.spec.ts'],
    plugins: { jest },
    rules: {
      'jest/expect-expect': [
        'error',
        {
          assertFunctionNames: [
            'expect',
            'expect*',
            'assert*',
            'fc.assert',
            '*.expect*',
            // The specs' own assertion helpers: each runs a case and expects its outcome.
            'violation',
            'everyVerb',
            'closedByServer',
            'holdThrough',
          ],
        },
      ],
    },
  },
];
