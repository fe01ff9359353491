import { systemClock as coreClock } from '@idgen/core';
import { systemClock } from './clock.js';

describe("the lease's clock", () => {
  it("defaults to the core's one systemClock, not a copy (issue 34: one home for a contract and its default)", () => {
    expect(systemClock).toBe(coreClock);
  });
});
