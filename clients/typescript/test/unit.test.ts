// Pure parts of the client: security options, targets, and error decoding.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";

import { create, toBinary } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";

import {
  AgentRuntimeClient,
  CleanupSettledSchema,
  CleanupStartedSchema,
  ClientError,
  CredentialsError,
  EventStream,
  NotFoundError,
  ResourceExhaustedError,
  RpcError,
  type RunEvent,
  RunEventSchema,
  RunEndedSchema,
  RunPhase,
  RunStartedSchema,
  RunWaitingSchema,
  UnavailableError,
  WaitReason,
  baseUrl,
  isLoopbackTarget,
  isResumable,
  resolveSecurity,
  toRpcError,
} from "../src/index.js";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";

const dir = mkdtempSync(join(tmpdir(), "agentrt-ts-unit-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

describe("resolveSecurity", () => {
  test("options win over AGENTRT_* variables, and an empty string turns one off", () => {
    const env = { AGENTRT_TOKEN: "from-env", AGENTRT_CA: file("ca.pem", PEM) };
    const fromEnv = resolveSecurity("runtime.example:443", { env });
    assert.equal(fromEnv.tls, true);
    assert.equal(fromEnv.token, "from-env");
    const off = resolveSecurity("127.0.0.1:50051", { env, caFile: "", token: "" });
    assert.equal(off.tls, false);
    assert.equal(off.token, "");
  });

  test("a token file's first line is the token", () => {
    const security = resolveSecurity("127.0.0.1:1", { env: {}, tokenFile: file("t.token", "  s3cret \nignored\n") });
    assert.equal(security.token, "s3cret");
  });

  const refusals: [string, Parameters<typeof resolveSecurity>[1], RegExp][] = [
    ["a token in clear to a remote host", { env: {}, token: "s3cret" }, /refusing to send a token in clear/],
    ["a certificate without its key", { env: {}, certFile: file("c.pem", PEM) }, /needs its key/],
    ["a key without its certificate", { env: {}, keyFile: file("k.pem", PEM) }, /needs its certificate/],
    ["a missing CA file", { env: {}, caFile: join(dir, "missing.pem") }, /cannot read CA file .*ENOENT/],
    ["a CA file that is not PEM", { env: {}, caFile: file("junk.pem", "junk") }, /is not PEM/],
    ["both a token and a token file", { env: {}, token: "a", tokenFile: file("x.token", "b") }, /not both/],
    ["an empty token file", { env: {}, tokenFile: file("empty.token", "\n") }, /no token on its first line/],
    ["a token with spaces", { env: {}, token: "a b", tls: true }, /visible ASCII/],
    ["TLS off with a CA", { env: {}, tls: false, caFile: file("ca2.pem", PEM) }, /TLS is turned off/],
    ["a server name over plaintext", { env: {}, serverName: "runtime" }, /server name/],
    ["a bad AGENTRT_TLS", { env: { AGENTRT_TLS: "maybe" } }, /AGENTRT_TLS must be/],
  ];
  for (const [what, options, message] of refusals) {
    test(`refuses ${what}, without echoing the token`, () => {
      assert.throws(
        () => resolveSecurity("runtime.example:50051", options),
        (err: unknown) => err instanceof CredentialsError && message.test(err.message) && !err.message.includes("s3cret"),
      );
    });
  }

  test("the client refuses a token and an authorization header together", () => {
    assert.throws(
      () => new AgentRuntimeClient("127.0.0.1:1", { env: {}, token: "t", headers: { Authorization: "Bearer x" } }),
      CredentialsError,
    );
  });
});

describe("targets", () => {
  test("loopback targets", () => {
    for (const target of ["127.0.0.1:1", "localhost:1", "[::1]:1", "dns:///localhost:1", "ipv4:127.0.0.1:1,127.0.0.2:2"]) {
      assert.ok(isLoopbackTarget(target), target);
    }
    for (const target of ["10.0.0.1:1", "example.com:443", "[2001:db8::1]:1", "ipv4:127.0.0.1:1,10.0.0.1:2", "http://127.0.0.1:1"]) {
      assert.ok(!isLoopbackTarget(target), target);
    }
  });

  test("baseUrl takes host:port and dns: targets, refuses others", () => {
    assert.equal(baseUrl("127.0.0.1:50051", false), "http://127.0.0.1:50051");
    assert.equal(baseUrl("dns:///runtime:443", true), "https://runtime:443");
    assert.equal(baseUrl("[::1]:5", false), "http://[::1]:5");
    for (const target of ["unix:/tmp/sock", "http://x:1", "ipv4:1.2.3.4:1,5.6.7.8:2"]) {
      assert.throws(() => baseUrl(target, false), ClientError, target);
    }
  });
});

describe("toRpcError", () => {
  function received(code: Code, details: { type: string; value: Uint8Array }[]): ConnectError {
    const error = new ConnectError("boom", code, { "grpc-status": String(code) });
    error.details = details;
    return error;
  }

  test("decodes ErrorInfo, BadRequest and RetryInfo, and picks the class by code", () => {
    const info = create(ErrorInfoSchema, { reason: "TOO_MANY_ACTIVE_RUNS", domain: "agentrt", metadata: { scope: "tenant" } });
    const retry = create(RetryInfoSchema, { retryDelay: create(DurationSchema, { seconds: 1n, nanos: 500_000_000 }) });
    const bad = create(BadRequestSchema, { fieldViolations: [{ field: "input", description: "too long" }] });
    const error = toRpcError(
      received(Code.ResourceExhausted, [
        { type: "google.rpc.ErrorInfo", value: toBinary(ErrorInfoSchema, info) },
        { type: "google.rpc.RetryInfo", value: toBinary(RetryInfoSchema, retry) },
        { type: "google.rpc.BadRequest", value: toBinary(BadRequestSchema, bad) },
        { type: "example.Unknown", value: new Uint8Array([1, 2]) },
      ]),
    );
    assert.ok(error instanceof ResourceExhaustedError);
    assert.equal(error.reason, "TOO_MANY_ACTIVE_RUNS");
    assert.deepEqual(error.metadata, { scope: "tenant" });
    assert.equal(error.retryDelayMs, 1500);
    assert.deepEqual(error.fieldViolations.map((v) => [v.field, v.description]), [["input", "too long"]]);
    assert.deepEqual(error.details.at(-1), { $typeName: "unknown", typeUrl: "example.Unknown", value: new Uint8Array([1, 2]) });
    assert.equal(error.message, "RESOURCE_EXHAUSTED: boom");
  });

  test("a detail that does not parse stays unknown instead of failing the conversion", () => {
    const error = toRpcError(received(Code.NotFound, [{ type: "google.rpc.ErrorInfo", value: new Uint8Array([0xff, 0xff]) }]));
    assert.ok(error instanceof NotFoundError);
    assert.equal(error.reason, "");
    assert.equal(error.details[0]?.$typeName, "unknown");
  });

  test("only broken connections and stalled followers are resumable", () => {
    const cut = toRpcError(new ConnectError("http/2 stream closed with error code CANCEL (0x8)", Code.Canceled)) as RpcError;
    assert.ok(isResumable(cut));
    const reset = toRpcError(new ConnectError("read ECONNRESET", Code.Aborted)) as RpcError;
    assert.ok(isResumable(reset), "a reset socket (Connect says ABORTED) is a broken connection");
    assert.ok(!isResumable(toRpcError(received(Code.Aborted, [])) as RpcError), "an ABORTED status the server sent");
    assert.ok(isResumable(toRpcError(received(Code.Unavailable, [])) as RpcError));
    const stalled = create(ErrorInfoSchema, { reason: "FOLLOWER_STALLED" });
    assert.ok(isResumable(toRpcError(received(Code.ResourceExhausted, [{ type: "google.rpc.ErrorInfo", value: toBinary(ErrorInfoSchema, stalled) }])) as RpcError));
    assert.ok(!isResumable(toRpcError(received(Code.ResourceExhausted, [])) as RpcError));
    assert.ok(!isResumable(toRpcError(received(Code.Canceled, [])) as RpcError), "a CANCELLED status the server sent");
    assert.ok(!isResumable(toRpcError(received(Code.NotFound, [])) as RpcError));
  });
});

describe("EventStream", () => {
  function event(seq: bigint, kind: "runEnded" | "runStarted" = "runStarted"): { event: RunEvent } {
    const value = kind === "runEnded" ? create(RunEndedSchema, { phase: RunPhase.COMPLETED }) : create(RunStartedSchema, {});
    return { event: create(RunEventSchema, { runId: "r1", seq, event: { case: kind, value } as RunEvent["event"] }) };
  }
  const unavailable = (): ConnectError => new ConnectError("down", Code.Unavailable);
  const fast = { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 2 };

  test("reopens after the last seq and skips what was delivered", async () => {
    const calls: bigint[] = [];
    const stream = new EventStream(
      async function* (afterSeq) {
        calls.push(afterSeq);
        if (calls.length === 1) {
          yield event(1n);
          yield event(2n);
          throw unavailable();
        }
        yield* [event(1n), event(2n), event(3n), event(4n, "runEnded")];
      },
      { reconnect: fast },
    );
    const seqs = (await stream.toArray()).map((e) => e.seq);
    assert.deepEqual(seqs, [1n, 2n, 3n, 4n]);
    assert.deepEqual(calls, [0n, 2n]);
    assert.equal(stream.reconnects, 1);
    assert.equal(stream.ended?.phase, RunPhase.COMPLETED);
    assert.equal(stream.runId, "r1");
  });

  test("a status the server sent is thrown at once; a broken connection only after maxAttempts", async () => {
    let opens = 0;
    const notFound = new EventStream(
      async function* () {
        opens += 1;
        throw new ConnectError("no run", Code.NotFound, { "grpc-status": "5" });
      },
      { reconnect: fast },
    );
    await assert.rejects(notFound.toArray(), NotFoundError);
    assert.equal(opens, 1);
    opens = 0;
    const down = new EventStream(
      async function* () {
        opens += 1;
        throw unavailable();
      },
      { reconnect: fast },
    );
    await assert.rejects(down.toArray(), UnavailableError);
    assert.equal(opens, fast.maxAttempts + 1);
  });

  // A run that ended with a cleanup UNKNOWN: its end, the open-tail mark, then the cleanup job's records.
  function tailEvent(seq: bigint, kind: "mark" | "cleanupStarted" | "cleanupSettled"): { event: RunEvent } {
    const body: RunEvent["event"] =
      kind === "mark"
        ? { case: "runWaiting", value: create(RunWaitingSchema, { reason: WaitReason.CLEANUP, phase: RunPhase.COMPLETED, detail: "1" }) }
        : kind === "cleanupStarted"
          ? { case: "cleanupStarted", value: create(CleanupStartedSchema, { cleanupId: "c1", attempt: 2 }) }
          : { case: "cleanupSettled", value: create(CleanupSettledSchema, { retries: 1 }) };
    return { event: create(RunEventSchema, { runId: "r1", seq, event: body }) };
  }
  const kinds = (events: RunEvent[]): string[] => events.map((e) => `${e.seq}:${e.event.case ?? ""}`);

  test("a follower reads through the cleanup tail to cleanupSettled, across a reconnect, the mark once", async () => {
    const calls: bigint[] = [];
    const stream = new EventStream(
      async function* (afterSeq) {
        calls.push(afterSeq);
        if (calls.length === 1) {
          yield* [event(1n), event(2n, "runEnded"), tailEvent(0n, "mark"), tailEvent(3n, "cleanupStarted")];
          throw unavailable(); // cut inside the tail: reopened after seq 3
        }
        yield* [tailEvent(0n, "mark"), tailEvent(4n, "cleanupStarted"), tailEvent(5n, "cleanupSettled")];
        yield event(6n); // never read: nothing is recorded after cleanupSettled
      },
      { reconnect: fast },
    );
    const events = await stream.toArray();
    assert.deepEqual(kinds(events), ["1:runStarted", "2:runEnded", "0:runWaiting", "3:cleanupStarted", "4:cleanupStarted", "5:cleanupSettled"]);
    assert.deepEqual(calls, [0n, 3n]);
    assert.equal(stream.tailOpen, false);
    assert.equal(stream.waiting, undefined);
    assert.equal(stream.settled?.retries, 1);
    assert.equal(stream.ended?.phase, RunPhase.COMPLETED);
  });

  test("cleanupTail: false stops at the open-tail mark and releases the call", async () => {
    let signal: AbortSignal | undefined;
    const stream = new EventStream(
      async function* (_afterSeq, callSignal) {
        signal = callSignal;
        yield* [event(1n), event(2n, "runEnded"), tailEvent(0n, "mark")];
        await new Promise(() => undefined); // a follow stream of an open tail: the server would wait
      },
      { cleanupTail: false },
    );
    const events = await stream.toArray();
    assert.deepEqual(kinds(events), ["1:runStarted", "2:runEnded", "0:runWaiting"]);
    assert.equal(stream.tailOpen, true);
    assert.equal(stream.ended?.phase, RunPhase.COMPLETED);
    assert.equal(signal?.aborted, true);
  });

  test("a stream the server ends at the mark says the tail is open, typed", async () => {
    const stream = new EventStream(async function* () {
      yield* [event(1n), event(2n, "runEnded"), tailEvent(0n, "mark")];
    });
    await stream.toArray();
    assert.equal(stream.tailOpen, true);
    assert.equal(stream.waiting?.reason, WaitReason.CLEANUP);
    assert.equal(stream.lastSeq, 2n);
  });

  test("close() during a backoff ends the iteration quietly", async () => {
    const stream = new EventStream(
      async function* () {
        throw unavailable();
      },
      { reconnect: { maxAttempts: 5, baseDelayMs: 60_000, maxDelayMs: 60_000 }, onReconnect: () => setImmediate(() => stream.close()) },
    );
    assert.deepEqual(await stream.toArray(), []);
    assert.equal(stream.reconnects, 1);
  });
});
