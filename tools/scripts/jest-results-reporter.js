// A jest reporter that records each project's totals, and the name and first lines of every failure, in
// <workspace>/.jest-results/, so the root `npm test` can close with one line over every project
// ("jest: N passed, M failed") and, when something failed, with what failed: CI shows only the tail of a
// run, and the failure itself may be thousands of lines above it. It also records how long the project and each spec
// file took (jest's own per-file timings), for the summary's slowest files and docs/test-timings.md.
const fs = require('node:fs');
const path = require('node:path');

const MESSAGE_LINES = 12;

/** The first lines of a failure message, without colour codes. */
function firstLines(message) {
  return message
    .replace(/\u001b\[[0-9;]*m/g, '')
    .split('\n')
    .filter((line) => line.trim() !== '' && !/node_modules|\(<anonymous>\)|node:internal/.test(line))
    .slice(0, MESSAGE_LINES)
    .join('\n');
}

class ResultsReporter {
  constructor(globalConfig, options = {}) {
    this.name = options.name || 'project';
  }
  onRunComplete(_contexts, results) {
    const dir = path.resolve(__dirname, '../../.jest-results');
    fs.mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `${this.name.replace(/[^a-z0-9.-]+/gi, '_')}.json`);
    const failures = [];
    const files = [];
    for (const suite of results.testResults) {
      const where = path.relative(path.resolve(__dirname, '../..'), suite.testFilePath);
      const { start, end } = suite.perfStats ?? {};
      if (start > 0 && end >= start) files.push({ where, ms: end - start, tests: suite.testResults.length });
      if (suite.testExecError) {
        failures.push({
          where,
          test: '(the suite did not run)',
          message: firstLines(suite.testExecError.message ?? ''),
        });
      }
      for (const test of suite.testResults) {
        if (test.status !== 'failed') continue;
        failures.push({ where, test: test.fullName, message: firstLines(test.failureMessages.join('\n')) });
      }
    }
    fs.writeFileSync(
      file,
      JSON.stringify({
        project: this.name,
        passed: results.numPassedTests,
        failed: results.numFailedTests + results.numRuntimeErrorTestSuites,
        skipped: results.numPendingTests + results.numTodoTests,
        suites: results.numTotalTestSuites,
        durationMs: Date.now() - results.startTime,
        files,
        failures,
      }),
    );
  }
}
module.exports = ResultsReporter;
