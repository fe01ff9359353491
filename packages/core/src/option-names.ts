/**
 * Every option name of a type, listed: adding an option to the type without listing it in such a table fails to
 * compile, so {@link refuseUnknownOptions} never refuses a real option.
 */
export type OptionNames<T> = { readonly [K in keyof Required<T>]: true };

/**
 * Throws a `TypeError` naming every option of `given` that `known` does not list (one set to `undefined` counts as
 * absent), and the names it takes: a misspelt or guessed option would otherwise be ignored without a word. One
 * helper for the client's and the embedded source's checks (issue 34: one home for what two packages share).
 *
 * @param factory the function whose options these are, to start the message (`createIdClient`)
 * @param where the nested object's path (`tls`, `etcd.auth`), or `''` for the options themselves
 * @param given what the caller passed there; anything but a plain object is left to the type checks
 * @param known the names `where` takes
 * @param shape appended to the message: a hint at the shape a guess usually gets wrong, or `''`
 */
export function refuseUnknownOptions(
  factory: string,
  where: string,
  given: unknown,
  known: Readonly<Record<string, true>>,
  shape = '',
): void {
  if (typeof given !== 'object' || given === null || Array.isArray(given)) return;
  const unknown = Object.keys(given).filter(
    (k) => !Object.hasOwn(known, k) && (given as Record<string, unknown>)[k] !== undefined,
  );
  if (unknown.length === 0) return;
  throw new TypeError(
    `${factory}: unknown option${unknown.length === 1 ? '' : 's'} ${unknown.map((k) => JSON.stringify(k)).join(', ')}` +
      `${where === '' ? '' : ` in ${where}`}; ${where === '' ? 'the options are' : `${where} takes`} ` +
      `${Object.keys(known).join(', ')}${shape}`,
  );
}
