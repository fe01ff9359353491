/** A `host:port` to listen on or advertise. */
export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** `host:port`, bracketing IPv6 hosts. */
export function formatHostPort(hp: HostPort): string {
  return hp.host.includes(':') ? `[${hp.host}]:${hp.port}` : `${hp.host}:${hp.port}`;
}

/** Parses `host:port` (IPv6 as `[::1]:port`), the port 1-65535 or, with `allowZero` (pick a free one), 0; `undefined` if it is not one. */
export function parseHostPort(text: string, allowZero: boolean): HostPort | undefined {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(text.trim());
  const port = m === null ? NaN : Number(m[3]);
  if (m === null || !(port >= (allowZero ? 0 : 1) && port <= 65_535)) return undefined;
  return { host: m[1] ?? m[2] ?? '', port };
}
