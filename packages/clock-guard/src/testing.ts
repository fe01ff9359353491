/**
 * `@idgen/clock-guard/testing`: what tests of code that mints through the guard need, kept out of the main
 * entry point: a clock the test moves by hand.
 *
 * @packageDocumentation
 */
export { createTestClock } from './clock.js';
export type { TestClock } from './clock.js';
