// A jest reporter that records each project's totals in <workspace>/.jest-results/, so the root
// `npm test` can print one closing line over every project ("jest: N passed, M failed").
const fs = require('node:fs');
const path = require('node:path');

class ResultsReporter {
  constructor(globalConfig, options = {}) {
    this.name = options.name || 'project';
  }
  onRunComplete(_contexts, results) {
    const dir = path.resolve(__dirname, '../../.jest-results');
    fs.mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `${this.name.replace(/[^a-z0-9.-]+/gi, '_')}.json`);
    fs.writeFileSync(
      file,
      JSON.stringify({
        project: this.name,
        passed: results.numPassedTests,
        failed: results.numFailedTests + results.numRuntimeErrorTestSuites,
        skipped: results.numPendingTests + results.numTodoTests,
        suites: results.numTotalTestSuites,
      }),
    );
  }
}
module.exports = ResultsReporter;
