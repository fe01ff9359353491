// Validates Kubernetes objects against the Kubernetes schemas (kubernetes-models, offline): reads a JSON array of
// objects on stdin, prints a JSON array of {kind, name, problem} for each object that does not validate (an
// unknown apiVersion/kind is a problem too), and exits 0 either way (1 only when it cannot run). A child
// process because kubernetes-models is ESM-only and Jest's module loader is CommonJS here.
// Used by apps/server/test/deploy.spec.ts on every rendered overlay.
const objects = JSON.parse(
  await new Promise((resolve, reject) => {
    let text = '';
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', (c) => (text += c));
    process.stdin.on('end', () => resolve(text));
    process.stdin.on('error', reject);
  }),
);
const problems = [];
for (const object of objects) {
  const { apiVersion = '', kind = '' } = object;
  const name = object.metadata?.name ?? '';
  // apiVersion "apps/v1" is kubernetes-models/apps/v1, the core group "v1" is kubernetes-models/v1.
  const module = `kubernetes-models/${apiVersion}/${kind}`;
  let Model;
  try {
    Model = (await import(module))[kind];
  } catch (e) {
    problems.push({ kind, name, problem: `no schema for ${apiVersion} ${kind} (${e.message})` });
    continue;
  }
  try {
    new Model(object).validate();
  } catch (e) {
    problems.push({ kind, name, problem: e.message });
  }
}
process.stdout.write(`${JSON.stringify(problems)}\n`);
