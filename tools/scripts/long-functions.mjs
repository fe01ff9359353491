// Lists the functions longer than a threshold (a closure past ~150 lines becomes a class with named methods or
// separate functions: docs/style.md "Stateful code"). Every kind counts: declarations, methods,
// constructors, accessors, function expressions and arrow functions, an anonymous one named by the variable,
// property or class field it is assigned to, or else by the call it is passed to (`describe('x') callback`).
// A function's length is its lines from its first token to its last, nested functions included.
//
//   node tools/scripts/long-functions.mjs [--threshold N] [--no-specs] DIR|FILE...
//
// prints `file:line name length` for each function over N lines (default 150), longest first, and a closing
// count; it exits 0 either way (a report, not a gate). dist/, node_modules/ and .d.ts files are left out.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative } from 'node:path';

const require = createRequire(new URL('../../package.json', import.meta.url));
const ts = require('typescript');

const SOURCE = /\.(?:[cm]?ts|tsx|[cm]?js|jsx)$/;
const SKIP_DIRS = new Set(['node_modules', 'dist', 'coverage', '.nx', '.cache', 'gen', 'out-tsc']);

function parseArgs(argv) {
  const roots = [];
  let threshold = 150;
  let specs = true;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--threshold' || a === '-t') threshold = Number(argv[++i]);
    else if (a.startsWith('--threshold=')) threshold = Number(a.slice('--threshold='.length));
    else if (a === '--no-specs') specs = false;
    else if (a === '--help' || a === '-h') {
      console.log('usage: node tools/scripts/long-functions.mjs [--threshold N] [--no-specs] DIR|FILE...');
      process.exit(0);
    } else roots.push(a);
  }
  if (!Number.isInteger(threshold) || threshold < 0) throw new RangeError('--threshold must be an integer >= 0');
  if (roots.length === 0) throw new Error('name at least one directory or file');
  return { roots, threshold, specs };
}

function* sourceFiles(path, specs) {
  const st = statSync(path);
  if (st.isFile()) {
    if (SOURCE.test(path) && !path.endsWith('.d.ts')) yield path;
    return;
  }
  for (const entry of readdirSync(path, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const full = join(path, entry.name);
    if (entry.isDirectory()) {
      if (!SKIP_DIRS.has(entry.name)) yield* sourceFiles(full, specs);
    } else if (SOURCE.test(entry.name) && !entry.name.endsWith('.d.ts')) {
      if (specs || !/\.(?:spec|test)\.[cm]?[jt]sx?$/.test(entry.name)) yield full;
    }
  }
}

const isFunction = (n) =>
  ts.isFunctionDeclaration(n) ||
  ts.isMethodDeclaration(n) ||
  ts.isConstructorDeclaration(n) ||
  ts.isGetAccessorDeclaration(n) ||
  ts.isSetAccessorDeclaration(n) ||
  ts.isFunctionExpression(n) ||
  ts.isArrowFunction(n);

/** The name of a property, variable or class member, as written. */
function nameText(name, sf) {
  if (name === undefined) return undefined;
  if (ts.isIdentifier(name) || ts.isPrivateIdentifier(name)) return name.text;
  if (ts.isStringLiteral(name) || ts.isNumericLiteral(name)) return name.text;
  return name.getText(sf);
}

/** The class a member belongs to, for `Class.method`. */
function ownerPrefix(n, sf) {
  const p = n.parent;
  if (p !== undefined && (ts.isClassDeclaration(p) || ts.isClassExpression(p))) {
    const cls = nameText(p.name, sf) ?? (ts.isVariableDeclaration(p.parent) ? nameText(p.parent.name, sf) : undefined);
    return cls !== undefined ? `${cls}.` : '';
  }
  return '';
}

/** Names a function by its own name, or by what it is assigned to or passed to. */
function functionName(n, sf) {
  if (ts.isConstructorDeclaration(n)) return `${ownerPrefix(n, sf)}constructor`;
  if (ts.isMethodDeclaration(n) || ts.isGetAccessorDeclaration(n) || ts.isSetAccessorDeclaration(n)) {
    const kind = ts.isGetAccessorDeclaration(n) ? 'get ' : ts.isSetAccessorDeclaration(n) ? 'set ' : '';
    return `${ownerPrefix(n, sf)}${kind}${nameText(n.name, sf)}`;
  }
  if ((ts.isFunctionDeclaration(n) || ts.isFunctionExpression(n)) && n.name !== undefined) return n.name.text;
  let p = n.parent;
  // Through wrappers such as `(async () => {})`, `x as T`, `fn satisfies T`.
  while (p !== undefined && (ts.isParenthesizedExpression(p) || ts.isAsExpression(p) || ts.isSatisfiesExpression(p)))
    p = p.parent;
  if (p === undefined) return '<anonymous>';
  if (ts.isVariableDeclaration(p) || ts.isPropertyDeclaration(p) || ts.isPropertyAssignment(p))
    return `${ts.isPropertyDeclaration(p) ? ownerPrefix(p, sf) : ''}${nameText(p.name, sf)}`;
  if (ts.isBinaryExpression(p) && p.operatorToken.kind === ts.SyntaxKind.EqualsToken) return p.left.getText(sf);
  if (ts.isExportAssignment(p)) return 'export default';
  if (ts.isCallExpression(p) || ts.isNewExpression(p)) {
    const callee = p.expression.getText(sf);
    const first = p.arguments?.[0];
    const label = first !== undefined && first !== n && ts.isStringLiteralLike(first) ? `('${first.text}')` : '()';
    return `${callee}${label} callback`;
  }
  return '<anonymous>';
}

function longFunctions(file, threshold) {
  const text = readFileSync(file, 'utf8');
  const kind = file.endsWith('x') ? ts.ScriptKind.TSX : undefined;
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind);
  const found = [];
  const visit = (n) => {
    if (isFunction(n) && n.body !== undefined) {
      const start = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
      const end = sf.getLineAndCharacterOfPosition(n.getEnd()).line + 1;
      const length = end - start + 1;
      if (length > threshold) found.push({ file, line: start, name: functionName(n, sf), length });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return found;
}

const { roots, threshold, specs } = parseArgs(process.argv.slice(2));
const rows = [];
for (const root of roots) for (const file of sourceFiles(root, specs)) rows.push(...longFunctions(file, threshold));
rows.sort((a, b) => b.length - a.length || a.file.localeCompare(b.file) || a.line - b.line);
for (const r of rows) console.log(`${relative(process.cwd(), r.file) || r.file}:${r.line} ${r.name} ${r.length}`);
console.log(`${rows.length} function(s) over ${threshold} lines in ${roots.join(' ')}`);
