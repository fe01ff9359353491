import { parseH2loadSummary } from './h2load.js';

// Recorded from h2load (nghttp2 1.52.0) against the bare server of bench:server.
const SUMMARY = `finished in 3.00s, 33717.33 req/s, 1.59MB/s
requests: 101152 total, 101152 started, 101152 done, 101150 succeeded, 2 failed, 0 errored, 0 timeout
status codes: 101148 2xx, 0 3xx, 2 4xx, 0 5xx
traffic: 4.78MB (5013622) total, 790.53KB (809496) headers (space savings 90.84%), 2.16MB (2262088) data`;

describe('parseH2loadSummary', () => {
  it('reads the rate, the successes and every kind of failure', () => {
    expect(parseH2loadSummary(SUMMARY)).toEqual({ requestsPerSecond: 33717.33, succeeded: 101148, failed: 4 });
  });

  it('refuses a summary it cannot read rather than report a figure', () => {
    expect(() => parseH2loadSummary('connect error')).toThrow("could not read h2load's summary");
  });
});
