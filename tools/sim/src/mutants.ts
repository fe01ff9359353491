/** Placeholder replaced below. */
export async function runMutants(_o: { seed: number; budgetSeconds: number; simMs: number }): Promise<number> {
  return 0;
}
