/**
 * mulberry32: a small, well-mixed 32-bit PRNG. The same seed gives the same sequence on every machine, which is all
 * a seeded test, fuzz or chaos schedule needs (not cryptographic). Values in [0, 1).
 */
export function createRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
