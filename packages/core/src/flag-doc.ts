/**
 * The flag contracts the packages share with the tools that offer their flags (docs/style.md "Defaults and
 * contracts": one home for a contract). A package that takes configuration declares its flags as {@link FlagDoc}s
 * (`@idgen/lease`'s etcd flags, `@idgen/serving`'s TLS flags); a tool reads them with `@idgen/flags` and hands each
 * value back as a {@link NamedValue}, so the package's one-line error names the flag or variable it came from.
 * Types only: the core stays free of I/O and dependencies.
 */

/** A package's flag, as a tool declares it: commander's syntax (`--etcd-ca <file>`), the field its value goes in, help. */
export interface FlagDoc<K extends string = string> {
  /** Commander's syntax: `--etcd-ca <file>`. */
  readonly flags: string;
  /** The field of the package's own input its value goes in. */
  readonly key: K;
  readonly description: string;
  readonly defaultValue?: string;
}

/** A flag's value, and the name to report it by: `--etcd-ca`, or `IDGEN_ETCD_CA` when the environment set it. */
export interface NamedValue {
  readonly value: string;
  readonly name: string;
}
