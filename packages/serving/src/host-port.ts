/** A `host:port` to listen on or advertise. */
export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** `host:port`, bracketing IPv6 hosts. */
export function formatHostPort(hp: HostPort): string {
  return hp.host.includes(':') ? `[${hp.host}]:${hp.port}` : `${hp.host}:${hp.port}`;
}
