// Event streams: async iterators over a run's events that resume after a disconnect.
//
// A stream remembers the last persisted seq it delivered. When the connection breaks (UNAVAILABLE,
// a reset stream) or the server drops a slow reader (RESOURCE_EXHAUSTED FOLLOWER_STALLED), it
// reopens the call after that seq and skips anything at or below it, so the caller sees every
// persisted event once: no gap, no duplicate. Live-only `model.text.delta` items (seq 0) published
// while disconnected are not replayed; the persisted `model.completed` is the truth.
//
// The cleanup tail: a run whose end left cleanups UNKNOWN gets, after `runEnded`, the records of the
// server's cleanup job (`cleanupStarted`/`cleanupCompleted`/`cleanupFailed`), closed by
// `cleanupSettled`. A stream that reaches the run while its tail is open gets `runWaiting` with
// reason `WaitReason.CLEANUP`: RunAgent and non-follow streams end there; a follow stream goes on with
// the tail (unless opened with `cleanupTail: false`, which stops it there).

import { Code } from "@connectrpc/connect";

import { type CleanupSettled, type RunEnded, type RunEvent, type RunWaiting, WaitReason } from "./gen/agentrt/runtime/v1/run_pb.js";
import { RpcError, toRpcError } from "./errors.js";

/** How a stream reconnects after a disconnect. */
export interface ReconnectOptions {
  /** Failed reconnects in a row (no event, open under 10 s) before the error is thrown (default 8; 0: never). */
  maxAttempts?: number;
  /** First backoff, doubled each attempt (default 100 ms). */
  baseDelayMs?: number;
  /** Largest backoff (default 3000 ms). */
  maxDelayMs?: number;
}

/** Called before each reconnect with the error that broke the stream and the attempt number (from 1). */
export type ReconnectListener = (error: RpcError, attempt: number, afterSeq: bigint) => void;

/** Opens (or reopens) the underlying call: items after `afterSeq` (RunAgent ignores it and replays). */
// A response carries one event, or (asked for with `batchEvents`) several in `events`.
export type OpenStream = (
  afterSeq: bigint,
  signal: AbortSignal,
) => AsyncIterable<{ event?: RunEvent; events?: RunEvent[] }>;

// A call open this long before it broke counts as a healthy connection, not as a failed attempt:
// a follower waiting hours for an approval may lose its connection many times.
const HEALTHY_MS = 10_000;

const DEFAULTS: Required<ReconnectOptions> = { maxAttempts: 8, baseDelayMs: 100, maxDelayMs: 3000 };

/**
 * The events of one run, as an async iterator that resumes after a disconnect.
 *
 * `for await (const event of stream)` until the server ends the stream; `break` (or `close()`)
 * stops early and never cancels the run. Afterwards `ended` or `waiting` says why it ended; both
 * unset means a non-follow replay reached the end of what is stored. `ended` with `tailOpen` means
 * the run's outcome is final but the cleanup job still has records to add (see the file comment).
 */
export class EventStream implements AsyncIterable<RunEvent> {
  /** The last persisted seq delivered: where a later `streamEvents` should resume. */
  lastSeq: bigint;
  /** The run id, once an event named it (or when the stream was opened for one run). */
  runId: string;
  /** The run's `run.ended`, if the stream delivered it: the run is over. */
  ended: RunEnded | undefined;
  /**
   * The `run.waiting` a RunAgent stream ended with: what the run now waits for. For an ended run,
   * reason `WaitReason.CLEANUP`: its cleanup tail is open (cleared again by `cleanupSettled`).
   */
  waiting: RunWaiting | undefined;
  /** The `cleanup.settled` that closed the run's cleanup tail, if the stream delivered it. */
  settled: CleanupSettled | undefined;
  /** How many times the stream reconnected. */
  reconnects = 0;

  private readonly open: OpenStream;
  private readonly reconnect: Required<ReconnectOptions>;
  private readonly onReconnect: ReconnectListener | undefined;
  private readonly cleanupTail: boolean;
  private readonly closing = new AbortController();
  private started = false;

  constructor(
    open: OpenStream,
    options: {
      runId?: string;
      afterSeq?: bigint;
      reconnect?: ReconnectOptions;
      onReconnect?: ReconnectListener;
      /** Follow a run's cleanup tail to `cleanupSettled` (default); false stops at the open-tail mark. */
      cleanupTail?: boolean;
    } = {},
  ) {
    this.open = open;
    this.runId = options.runId ?? "";
    this.lastSeq = options.afterSeq ?? 0n;
    this.reconnect = { ...DEFAULTS, ...options.reconnect };
    this.onReconnect = options.onReconnect;
    this.cleanupTail = options.cleanupTail ?? true;
  }

  /** True when the stream reached the run's end while its cleanup tail was open, and no `cleanupSettled` came after. */
  get tailOpen(): boolean {
    return this.waiting?.reason === WaitReason.CLEANUP;
  }

  /** Stops the stream: the current call is cancelled and iteration ends. The run goes on. */
  close(): void {
    this.closing.abort();
  }

  [Symbol.asyncIterator](): AsyncIterator<RunEvent> {
    if (this.started) throw new Error("an EventStream can be iterated once");
    this.started = true;
    return this.iterate();
  }

  /** Collects every event until the stream ends. */
  async toArray(): Promise<RunEvent[]> {
    const events: RunEvent[] = [];
    for await (const event of this) events.push(event);
    return events;
  }

  private async *iterate(): AsyncGenerator<RunEvent, void, undefined> {
    let failures = 0;
    while (!this.closing.signal.aborted) {
      const call = new AbortController();
      const stop = (): void => call.abort();
      this.closing.signal.addEventListener("abort", stop);
      const opened = Date.now();
      try {
        for await (const item of this.open(this.lastSeq, call.signal)) {
          const events = item.events?.length ? item.events : item.event !== undefined ? [item.event] : [];
          for (const event of events) {
            if (event.seq !== 0n && event.seq <= this.lastSeq) continue; // replayed after a reconnect
            if (isTailMark(event) && this.tailOpen) continue; // the mark again, from a reopened call
            failures = 0;
            this.note(event);
            yield event;
            // These end the stream: stop here, so a cut before the server's end is not reopened. After
            // runEnded the server ends the stream or marks an open cleanup tail; a follow stream goes
            // on with the tail, unless asked to stop at the mark.
            if (event.event.case === "cleanupSettled") return;
            if (event.event.case === "runWaiting" && (!isTailMark(event) || !this.cleanupTail)) return;
          }
        }
        return; // the server ended the stream
      } catch (err) {
        if (this.closing.signal.aborted) return;
        const error = toRpcError(err);
        if (Date.now() - opened >= HEALTHY_MS) failures = 0; // a long-lived stream broke: not a failing reconnect
        if (!(error instanceof RpcError) || !isResumable(error) || failures >= this.reconnect.maxAttempts) throw error;
        failures += 1;
        this.reconnects += 1;
        this.onReconnect?.(error, failures, this.lastSeq);
        await sleep(backoff(this.reconnect, failures), this.closing.signal);
      } finally {
        this.closing.signal.removeEventListener("abort", stop);
        call.abort(); // releases the HTTP/2 stream when the caller stopped early
      }
    }
  }

  private note(event: RunEvent): void {
    if (event.runId) this.runId = event.runId;
    if (event.seq !== 0n) this.lastSeq = event.seq;
    if (event.event.case === "runEnded") this.ended = event.event.value;
    else if (event.event.case === "runWaiting") this.waiting = event.event.value;
    else if (event.event.case === "cleanupSettled") {
      this.settled = event.event.value;
      this.waiting = undefined; // the tail it marked is closed
    }
  }
}

/** True for the `runWaiting` that says a run has ended with its cleanup tail still open. */
export function isTailMark(event: RunEvent): boolean {
  return event.event.case === "runWaiting" && event.event.value.reason === WaitReason.CLEANUP;
}

/**
 * True for errors after which reopening the stream may succeed: the server is unreachable, the
 * connection broke (the call ended with no gRPC status from the server: a reset stream or socket,
 * which Connect reports as CANCELLED, ABORTED, INTERNAL or UNKNOWN), or a slow reader was dropped.
 */
export function isResumable(error: RpcError): boolean {
  if (error.code === Code.Unavailable) return true;
  if (error.code === Code.ResourceExhausted) return error.reason === "FOLLOWER_STALLED";
  const transportLevel = !error.trailers.has("grpc-status");
  return transportLevel && BROKEN_CONNECTION.has(error.code);
}

const BROKEN_CONNECTION: ReadonlySet<Code> = new Set([Code.Canceled, Code.Aborted, Code.Internal, Code.Unknown]);

function backoff(options: Required<ReconnectOptions>, attempt: number): number {
  return Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** (attempt - 1));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}
