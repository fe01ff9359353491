import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import {
  createMintScheduler,
  isFencedError,
  MintAbandonedError,
  type FenceReason,
  type GuardedMinter,
  type GuardStatus,
  type MintScheduler,
} from '@idgen/clock-guard';
import {
  ClockState,
  FenceReason as WireFenceReason,
  GetStatusResponseSchema,
  type Health,
  HealthCheckResponse_ServingStatus,
  IdGenerator,
  LeaseMode,
  NodeState,
  type ReadinessReason as WireReadinessReason,
  type GetStatusResponse,
} from '@idgen/proto';
import { READINESS_REASONS, type Phase, type Readiness } from './readiness.js';

/** The part of the clock guard the handlers use (a {@link GuardedMinter} satisfies it). */
export type ServingGuard = Pick<
  GuardedMinter,
  'nextBlock' | 'tryNextBlock' | 'canMint' | 'status' | 'layout' | 'lastMintedMs'
>;

/** What the status endpoints need from the lease (`WorkerLease.snapshot()` of `@idgen/lease` satisfies it). */
export interface LeaseView {
  readonly nodeId: string;
  readonly leaseId: string | undefined;
  readonly keepAliveAgeSeconds: number | undefined;
  readonly deadlineInMs: number | undefined;
  readonly mode: 'etcd' | 'standalone';
}

/** Everything the handlers read; plain functions so tests and the composition root can supply them. */
export interface ServiceDeps {
  readonly guard: ServingGuard;
  readonly lease: () => LeaseView;
  readonly phase: () => Phase;
  readonly region: number;
  readonly maxCount: number;
  readonly timeSourceMode: 'chrony' | 'none';
  readonly advertise: () => string;
  /** Why the node may or may not mint now (readiness.ts): GetStatus carries it in fields 19-23 when given. */
  readonly readiness?: () => Readiness;
  /** Called with any error the guard throws that is not a fence (a bug): the caller gets INTERNAL. */
  readonly onUnexpected?: (e: unknown) => void;
  /**
   * `redacted`: GetStatus leaves out the lease id, the fence deadline, the floor and the last minted millisecond
   * (what an unauthenticated caller does not need). Default `full`.
   */
  readonly statusDetails?: 'full' | 'redacted';
  /** The node's one mint scheduler (shared by every path that mints); default one of its own over `guard`. */
  readonly mints?: MintScheduler;
  /** What the node runs, for GetStatus fields 25-26 (so a region running mixed versions shows it); default empty. */
  readonly build?: NodeBuild;
}

/** The release and source commit a node runs (GetStatus `version`, `commit`); never redacted: neither is a secret. */
export interface NodeBuild {
  /** The server package's version, e.g. `0.1.0`. */
  readonly version: string;
  /** The source commit (a git hash), or empty when unknown. */
  readonly commit: string;
}

/** Response header naming the fence reason on UNAVAILABLE, so clients can log why without parsing text. */
export const FENCE_REASON_HEADER = 'idgen-fence-reason';

const WIRE_FENCE_REASONS: Record<FenceReason, WireFenceReason> = {
  'not-assigned': WireFenceReason.NOT_ASSIGNED,
  'waiting-for-floor': WireFenceReason.WAITING_FOR_FLOOR,
  'clock-rollback': WireFenceReason.CLOCK_ROLLBACK,
  'clock-out-of-range': WireFenceReason.CLOCK_OUT_OF_RANGE,
  lease: WireFenceReason.LEASE,
  'clock-ahead': WireFenceReason.CLOCK_AHEAD,
  'time-source': WireFenceReason.TIME_SOURCE,
  draining: WireFenceReason.DRAINING,
};

/** Maps a guard refusal to UNAVAILABLE: the caller retries another node (docs/design.md §6). */
export function unavailable(reason: FenceReason, message: string): ConnectError {
  const error = new ConnectError(`fenced (${reason}): ${message}`, Code.Unavailable);
  error.metadata.set(FENCE_REASON_HEADER, reason);
  return error;
}

/** One block of consecutive IDs as the wire carries it (docs/design.md §1). */
export interface WireBlock {
  readonly first: bigint;
  readonly count: number;
}

/**
 * NextIds without the protocol: `count` IDs as blocks, or a ConnectError (INVALID_ARGUMENT naming the range,
 * UNAVAILABLE with the fence reason). Touches nothing but the guard: no etcd, no I/O on the path of an ID
 * (docs/design.md §2). Shared by the Connect handler and the fast path (fast-path.ts), through one mint scheduler
 * (`deps.mints`): what the current millisecond can serve comes back at once, the rest of a request waits for
 * its millisecond on a timer, never spinning on the event loop, shared fairly between `owner`s (connections).
 */
export function createNextIds(
  deps: Pick<ServiceDeps, 'guard' | 'maxCount' | 'onUnexpected' | 'mints'>,
): (count: number, owner?: object, abandoned?: () => boolean) => WireBlock[] | Promise<WireBlock[]> {
  const { maxCount } = deps;
  const mints = deps.mints ?? createMintScheduler(deps.guard);
  const rangeMessage = `count must be from 1 to ${maxCount}`;
  const toConnectError = (e: unknown): ConnectError => {
    if (isFencedError(e)) return unavailable(e.reason, e.message);
    // The caller went away (reset, deadline, connection gone) while its IDs waited: nobody reads the answer and
    // nothing went wrong here. Logging each one would let a caller flood the log and stall the event loop.
    if (e instanceof MintAbandonedError) return new ConnectError(e.message, Code.Canceled);
    deps.onUnexpected?.(e);
    return new ConnectError('internal error while minting', Code.Internal);
  };
  const rejectAsConnectError = (e: unknown): never => {
    throw toConnectError(e);
  };
  return (count, owner, abandoned) => {
    if (!(count >= 1 && count <= maxCount)) {
      throw new ConnectError(`${rangeMessage}, got ${count}`, Code.InvalidArgument);
    }
    let minted: WireBlock[] | Promise<WireBlock[]>;
    try {
      // MintedBlock also carries its millisecond; the wire carries only (first, count): structurally a WireBlock.
      minted = mints.mint(count, owner, abandoned);
    } catch (e) {
      throw toConnectError(e);
    }
    return minted instanceof Promise ? minted.catch(rejectAsConnectError) : minted;
  };
}

/** The `idgen.v1.IdGenerator` handlers. */
export function createIdGeneratorService(deps: ServiceDeps): ServiceImpl<typeof IdGenerator> {
  const nextIds = createNextIds(deps);
  return {
    async nextIds(request) {
      return { blocks: await nextIds(request.count) };
    },
    getStatus() {
      return statusResponse(deps);
    },
  };
}

/** The node's state as the wire names it (docs/design.md §6: starting, serving, fenced, draining). */
export function nodeState(phase: Phase, canMint: boolean): NodeState {
  if (phase === 'draining') return NodeState.DRAINING;
  if (canMint) return NodeState.SERVING;
  return phase === 'starting' ? NodeState.STARTING : NodeState.FENCED;
}

/** Builds GetStatusResponse from the guard, the lease and the phase. */
export function statusResponse(deps: ServiceDeps): GetStatusResponse {
  const g: GuardStatus = deps.guard.status();
  const lease = deps.lease();
  const canMint = deps.guard.canMint();
  const layout = deps.guard.layout;
  const fenced = !canMint && g.reason !== undefined;
  const full = deps.statusDetails !== 'redacted';
  let clockState = g.timeSource.healthy ? ClockState.HEALTHY : ClockState.UNHEALTHY;
  if (deps.timeSourceMode === 'none') clockState = ClockState.UNCHECKED;
  return create(GetStatusResponseSchema, {
    region: g.region ?? deps.region,
    worker: g.worker,
    nodeId: lease.nodeId,
    state: nodeState(deps.phase(), canMint),
    fenceReason: fenced && g.reason !== undefined ? WIRE_FENCE_REASONS[g.reason] : WireFenceReason.UNSPECIFIED,
    fenceMessage: fenced ? (g.message ?? '') : '',
    leaseId: full ? (lease.leaseId ?? '') : '',
    keepAliveAgeSeconds: lease.keepAliveAgeSeconds,
    clockState,
    clockOffsetSeconds: g.timeSource.offsetSeconds,
    clockMessage: g.timeSource.message,
    layout: {
      epochMs: BigInt(layout.epochMs),
      timestampBits: layout.timestampBits,
      regionBits: layout.regionBits,
      workerBits: layout.workerBits,
      sequenceBits: layout.sequenceBits,
    },
    leaseMode: lease.mode === 'etcd' ? LeaseMode.ETCD : LeaseMode.STANDALONE,
    fenceDeadlineInMs: !full || lease.deadlineInMs === undefined ? undefined : BigInt(Math.round(lease.deadlineInMs)),
    floorMs: full ? BigInt(Math.max(0, g.floorMs)) : 0n,
    lastMintedMs: full ? BigInt(deps.guard.lastMintedMs()) : 0n,
    detailsRedacted: !full,
    advertiseAddress: deps.advertise(),
    version: deps.build?.version ?? '',
    commit: deps.build?.commit ?? '',
    maxCount: deps.maxCount,
    ...(deps.readiness === undefined ? {} : readinessFields(deps.readiness())),
  });
}

/** GetStatusResponse fields 19-23 (idgen.proto). */
function readinessFields(
  r: Readiness,
): Pick<GetStatusResponse, 'ready' | 'readinessReason' | 'readinessCause' | 'readinessDetail' | 'readinessWaitMs'> {
  return {
    ready: r.ready,
    readinessReason: (READINESS_REASONS.indexOf(r.reason) + 1) as WireReadinessReason,
    readinessCause: r.cause ?? '',
    readinessDetail: r.detail,
    readinessWaitMs: r.waitMs === undefined ? undefined : BigInt(Math.round(r.waitMs)),
  };
}

/** Response headers of `grpc.health.v1.Health/Check` saying why (its message has only a status). */
export const READINESS_HEADERS = {
  reason: 'idgen-readiness-reason',
  cause: 'idgen-readiness-cause',
  detail: 'idgen-readiness-detail',
} as const;

/** A header value from free text: printable ASCII only (RFC 9110 field values), at most 400 characters. */
function headerSafe(text: string): string {
  const ascii = text.replace(/[^\x20-\x7e]/g, '?');
  return ascii.length > 400 ? `${ascii.slice(0, 399)}?` : ascii;
}

/** Service names Check answers for: the server as a whole ("") and the IdGenerator service. */
const KNOWN_SERVICES = new Set(['', IdGenerator.typeName]);

/**
 * `grpc.health.v1.Health`: SERVING only while the node may mint now (docs/design.md §6), NOT_SERVING otherwise;
 * NOT_FOUND for a service it does not serve. Check says why in its response headers
 * ({@link READINESS_HEADERS}: `grpcurl -v` prints them). Watch is left unimplemented (UNIMPLEMENTED tells
 * clients not to retry it): a stream held open per prober is a resource a caller could pile up.
 */
export function createHealthService(readiness: () => Readiness): Partial<ServiceImpl<typeof Health>> {
  const status = (r: Readiness): HealthCheckResponse_ServingStatus =>
    r.ready ? HealthCheckResponse_ServingStatus.SERVING : HealthCheckResponse_ServingStatus.NOT_SERVING;
  return {
    check(request, context) {
      if (!KNOWN_SERVICES.has(request.service)) {
        throw new ConnectError(`unknown service ${JSON.stringify(request.service.slice(0, 200))}`, Code.NotFound);
      }
      const r = readiness();
      context.responseHeader.set(READINESS_HEADERS.reason, r.reason);
      if (r.cause !== undefined) context.responseHeader.set(READINESS_HEADERS.cause, r.cause);
      context.responseHeader.set(
        READINESS_HEADERS.detail,
        headerSafe(r.waitMs === undefined ? r.detail : `${r.waitMs} ms left: ${r.detail}`),
      );
      return { status: status(r) };
    },
    list() {
      const s = status(readiness());
      return { statuses: { '': { status: s }, [IdGenerator.typeName]: { status: s } } };
    },
  };
}
