// The TypeScript client of agentrt.runtime.v1.AgentRuntimeService, over gRPC (HTTP/2) with
// Connect's Node transport.

import { createHash, randomUUID } from "node:crypto";
import type { SecureClientSessionOptions } from "node:http2";

import type { MessageInitShape } from "@bufbuild/protobuf";
import { type Client as ConnectClient, type Interceptor, type Transport, createClient } from "@connectrpc/connect";
import { type Http2SessionOptions, Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";

import { ApprovalDecision, type PayloadRef, type Run, type RunPhase } from "./gen/agentrt/runtime/v1/run_pb.js";
import {
  AgentRuntimeService,
  type EventDetail,
  type ListRunsResponse,
  type RunAgentRequestSchema,
  type RunDiagnostics,
  type StartRunRequestSchema,
} from "./gen/agentrt/runtime/v1/runtime_service_pb.js";
import {
  type ChannelSecurity,
  DEFAULT_TARGET,
  ENV_TARGET,
  type SecurityOptions,
  describeSecurity,
  resolveSecurity,
} from "./credentials.js";
import { ClientError, CredentialsError, toRpcError } from "./errors.js";
import { EventStream, type ReconnectListener, type ReconnectOptions } from "./stream.js";

/** Default deadline of unary calls, in ms. Streams have none: runs can be long. */
export const DEFAULT_TIMEOUT_MS = 10_000;

/** Options of a client; security options left undefined come from AGENTRT_* variables. */
export interface ClientOptions extends SecurityOptions {
  /** Deadline of unary calls in ms (default 10 s). */
  timeoutMs?: number;
  /** Headers (gRPC metadata) sent with every call. */
  headers?: Readonly<Record<string, string>>;
  /** How streams reconnect after a disconnect. */
  reconnect?: ReconnectOptions;
  /** A ready transport to use instead; no security option (nor AGENTRT_* variable) is applied to it. */
  transport?: Transport;
  /** HTTP/2 keepalive: ping a connection with open streams every pingIntervalMs (off by default). */
  http2?: Http2SessionOptions;
}

/** What a stream call takes besides its request. */
export interface StreamOptions {
  /** Deadline of the whole stream in ms; none by default. */
  timeoutMs?: number;
  /** Overrides the client's reconnect options for this stream. */
  reconnect?: ReconnectOptions;
  /** Called before each reconnect. */
  onReconnect?: ReconnectListener;
}

/** Fields of a RunAgent / StartRun request (agentName and input, or an inline agent, ...). */
export type StartRequest = MessageInitShape<typeof RunAgentRequestSchema> & MessageInitShape<typeof StartRunRequestSchema>;

/** A payload fetched whole with GetPayload. */
export interface Payload {
  readonly ref: PayloadRef;
  readonly data: Uint8Array;
}

/** The bytes received do not match the payload's size and sha256. */
export class PayloadMismatchError extends ClientError {}

/**
 * Client of the agentrt runtime.
 *
 * ```ts
 * const client = new AgentRuntimeClient("127.0.0.1:50051", { tokenFile: "alice.token" });
 * for await (const event of client.runAgent({ agentName: "refund-demo", input: "refund A100" })) {
 *   console.log(event.seq, event.event.case);
 * }
 * client.close();
 * ```
 */
export class AgentRuntimeClient {
  readonly target: string;
  /** A secret-free summary of how the client connects, e.g. `mtls token`. */
  readonly security: string;
  private readonly rpc: ConnectClient<typeof AgentRuntimeService>;
  private readonly session: Http2SessionManager | undefined;
  private readonly timeoutMs: number;
  private readonly headers: Readonly<Record<string, string>>;
  private readonly reconnect: ReconnectOptions;

  /**
   * @param target `host:port` of the runtime (default `$AGENTRT_TARGET`, else 127.0.0.1:50051).
   * @throws CredentialsError when a TLS or token file cannot be used, or a token would travel in clear.
   */
  constructor(target?: string, options: ClientOptions = {}) {
    const env = options.env ?? process.env;
    this.target = target || env[ENV_TARGET] || DEFAULT_TARGET;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.headers = lowerKeys(options.headers ?? {});
    this.reconnect = options.reconnect ?? {};
    let transport = options.transport;
    if (transport === undefined) {
      const security = resolveSecurity(this.target, options);
      if (security.token && "authorization" in this.headers) {
        throw new CredentialsError("give the token or an authorization header, not both");
      }
      this.security = describeSecurity(security);
      const url = baseUrl(this.target, security.tls);
      this.session = new Http2SessionManager(url, options.http2 ?? {}, nodeOptions(security));
      transport = createGrpcTransport({
        baseUrl: url,
        sessionManager: this.session,
        interceptors: security.token ? [bearer(security.token)] : [],
      });
    } else {
      this.security = "given transport";
    }
    this.rpc = createClient(AgentRuntimeService, transport);
  }

  /** Closes the client's connection (not a transport it was given); open streams fail. */
  close(): void {
    this.session?.abort();
  }

  /**
   * Starts a run (or attaches to the one `requestKey` started) and streams its events until the
   * run ends or waits for something outside itself (then the last event is `runWaiting`). A run
   * that ends with cleanups the server's cleanup job still retries ends the stream with
   * `runWaiting` `WaitReason.CLEANUP` right after `runEnded` (`tailOpen`): the outcome does not wait.
   *
   * `requestKey` defaults to a random UUID so that a reconnect attaches to the same run instead
   * of starting another; events already delivered are skipped. Closing the stream never cancels the run.
   */
  runAgent(request: StartRequest, options: StreamOptions = {}): EventStream {
    // batchEvents: fewer messages for the same events; an older server ignores it.
    const fixed = { ...request, requestKey: request.requestKey || randomUUID(), batchEvents: true };
    return new EventStream((_afterSeq, signal) => this.rpc.runAgent(fixed, this.callOptions(signal, options.timeoutMs)), {
      reconnect: options.reconnect ?? this.reconnect,
      onReconnect: options.onReconnect,
    });
  }

  /**
   * Replays a run's persisted events after `afterSeq`, then (with `follow`) tails live ones until
   * the run ends and its log is complete: a run that ended with cleanups UNKNOWN is followed through
   * its cleanup tail to `cleanupSettled` (the server's cleanup job may take hours). `cleanupTail:
   * false` stops at the `runWaiting` `WaitReason.CLEANUP` after `runEnded` instead, for a caller
   * that wants the outcome only. After a disconnect it resumes after the last seq received.
   * `detail` (EventDetail, default ALL) leaves out events server-side; seqs then skip.
   */
  streamEvents(
    runId: string,
    options: StreamOptions & {
      afterSeq?: bigint | number;
      follow?: boolean;
      cleanupTail?: boolean;
      detail?: EventDetail;
    } = {},
  ): EventStream {
    const follow = options.follow ?? false;
    const detail = options.detail;
    return new EventStream(
      (afterSeq, signal) =>
        this.rpc.streamRunEvents(
          { runId, afterSeq, follow, detail, batchEvents: true },
          this.callOptions(signal, options.timeoutMs),
        ),
      {
        runId,
        afterSeq: BigInt(options.afterSeq ?? 0),
        reconnect: options.reconnect ?? this.reconnect,
        onReconnect: options.onReconnect,
        cleanupTail: options.cleanupTail ?? true,
      },
    );
  }

  /** Starts a run (or returns the one `requestKey` started) without streaming. */
  async startRun(request: StartRequest): Promise<Run> {
    const response = await this.unary(() => this.rpc.startRun(request, this.callOptions()));
    return required(response.run);
  }

  /** Returns one run; NotFoundError when there is none (or it is another tenant's). */
  async getRun(runId: string): Promise<Run> {
    const response = await this.unary(() => this.rpc.getRun({ runId }, this.callOptions()));
    return required(response.run);
  }

  /**
   * Why a run is where it is (the operator role): its lease owner and expiry, fencing generation,
   * faults and last error, pending calls with their attempts, next retry time and remote
   * operation id, the reconcile schedule of an unknown outcome, cleanup status and trace id.
   * NotFoundError when the caller's tenant has no such run; PermissionDeniedError without the
   * operator (or admin) role.
   */
  async getRunDiagnostics(runId: string): Promise<RunDiagnostics> {
    const response = await this.unary(() => this.rpc.getRunDiagnostics({ runId }, this.callOptions()));
    if (response.diagnostics === undefined) throw new ClientError("the server answered without diagnostics");
    return response.diagnostics;
  }

  /**
   * Lists runs, newest first; pass `nextPageToken` back as `pageToken` for the next page.
   * `needsAttention` keeps runs whose wait was escalated to a person; `cleanupUnknown` keeps runs
   * whose cleanups may have left a resource behind (`cleanupStatus` UNKNOWN).
   */
  async listRuns(
    options: {
      pageSize?: number;
      pageToken?: string;
      phases?: RunPhase[];
      agentName?: string;
      sessionId?: string;
      needsAttention?: boolean;
      cleanupUnknown?: boolean;
    } = {},
  ): Promise<ListRunsResponse> {
    return this.unary(() => this.rpc.listRuns({ pageSize: 50, ...options }, this.callOptions()));
  }

  /** Asks a run to stop; in-flight calls are cancelled. Cancellation is not rollback. */
  async cancelRun(runId: string, options: { reason?: string } = {}): Promise<Run> {
    const response = await this.unary(() => this.rpc.cancelRun({ runId, reason: options.reason ?? "" }, this.callOptions()));
    return required(response.run);
  }

  /**
   * Approves or rejects a call waiting for a person. `argsHash` and `expectedRevision` are what the
   * approver saw (the run's `pendingApproval.argsHash` and `revision`).
   */
  async resolveApproval(
    runId: string,
    approvalId: string,
    options: { approve: boolean; argsHash: string; expectedRevision: bigint | number; comment?: string },
  ): Promise<Run> {
    const request = {
      runId,
      approvalId,
      decision: options.approve ? ApprovalDecision.APPROVE : ApprovalDecision.REJECT,
      argsHash: options.argsHash,
      expectedRevision: BigInt(options.expectedRevision),
      comment: options.comment ?? "",
    };
    const response = await this.unary(() => this.rpc.resolveApproval(request, this.callOptions()));
    return required(response.run);
  }

  /**
   * Fetches a payload of a run (a large input, output or tool result) whole, checking its size and sha256.
   *
   * @throws PayloadMismatchError when the bytes do not match the reference.
   */
  async getPayload(runId: string, payloadId: string, options: { timeoutMs?: number } = {}): Promise<Payload> {
    let ref: PayloadRef | undefined;
    const chunks: Uint8Array[] = [];
    let size = 0;
    try {
      for await (const chunk of this.rpc.getPayload({ runId, payloadId }, this.callOptions(undefined, options.timeoutMs))) {
        ref ??= chunk.ref;
        if (BigInt(size) !== chunk.offset) throw new PayloadMismatchError(`chunk at offset ${chunk.offset}, expected ${size}`);
        chunks.push(chunk.data);
        size += chunk.data.length;
      }
    } catch (err) {
      throw toRpcError(err);
    }
    if (ref === undefined) throw new PayloadMismatchError("the payload stream carried no reference");
    const data = Buffer.concat(chunks);
    const digest = createHash("sha256").update(data).digest("hex");
    if (BigInt(data.length) !== ref.sizeBytes || digest !== ref.sha256) {
      throw new PayloadMismatchError(`payload ${payloadId.slice(0, 64)} does not match its size and sha256`);
    }
    return { ref, data: new Uint8Array(data) };
  }

  private callOptions(signal?: AbortSignal, timeoutMs?: number): { headers: Record<string, string>; signal?: AbortSignal; timeoutMs?: number } {
    return { headers: { ...this.headers }, signal, timeoutMs: timeoutMs ?? (signal === undefined ? this.timeoutMs : undefined) };
  }

  private async unary<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (err) {
      throw toRpcError(err);
    }
  }
}

function required(run: Run | undefined): Run {
  if (run === undefined) throw new ClientError("the server answered without a run");
  return run;
}

function lowerKeys(headers: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
}

function bearer(token: string): Interceptor {
  return (next) => async (request) => {
    request.header.set("authorization", `Bearer ${token}`);
    return next(request);
  };
}

/** The URL Connect dials for a gRPC target: `host:port`, `[v6]:port` or `dns:[///]host:port`. */
export function baseUrl(target: string, tls: boolean): string {
  let rest = target;
  if (rest.startsWith("dns:")) rest = rest.slice(4).replace(/^\/\/[^/]*\//, "");
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(rest) || rest.startsWith("unix:") || rest.includes(",")) {
    throw new ClientError(`target ${target.slice(0, 200)} is not host:port (unix sockets and address lists are not supported)`);
  }
  return `${tls ? "https" : "http"}://${rest}`;
}

function nodeOptions(security: ChannelSecurity): SecureClientSessionOptions {
  if (!security.tls) return {};
  const options: SecureClientSessionOptions = {};
  if (security.ca) options.ca = security.ca;
  if (security.cert) options.cert = security.cert;
  if (security.key) options.key = security.key;
  // The name checked against the server's certificate (and sent as SNI), when not the target's host.
  if (security.serverName) options.servername = security.serverName;
  return options;
}
