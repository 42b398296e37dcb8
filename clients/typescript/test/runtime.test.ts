// The client against a real runtime and tool host over loopback: runs, approvals, cancellation,
// resuming after a real disconnect, and decoded errors.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  AgentRuntimeClient,
  InvalidArgumentError,
  NotFoundError,
  PendingCallState,
  type Run,
  type RunEvent,
  RunPhase,
  WaitReason,
} from "../src/index.js";
import { Relay } from "./helpers/proxy.js";
import { BLOB_BYTES, Runtime } from "./helpers/runtime.js";
import { waitFor } from "./helpers/wait.js";

const runtime = new Runtime();
let client: AgentRuntimeClient;

before(async () => {
  await runtime.start();
  client = new AgentRuntimeClient(runtime.address, { env: {} });
});

after(async () => {
  client?.close();
  await runtime.stop();
});

function seqs(events: readonly RunEvent[]): bigint[] {
  return events.filter((e) => e.seq !== 0n).map((e) => e.seq);
}

function range(from: bigint, to: bigint): bigint[] {
  const out: bigint[] = [];
  for (let s = from; s <= to; s++) out.push(s);
  return out;
}

/** Starts the refund agent and reads its RunAgent stream until it pauses for approval. */
async function runUntilApproval(): Promise<{ runId: string; events: RunEvent[]; lastSeq: bigint }> {
  const stream = client.runAgent({ agentName: "refund-demo", input: "refund A100" });
  const events = await stream.toArray();
  assert.equal(stream.waiting?.reason, WaitReason.APPROVAL);
  assert.equal(events.at(-1)?.event.case, "runWaiting");
  return { runId: stream.runId, events, lastSeq: stream.lastSeq };
}

async function approve(runId: string): Promise<Run> {
  const run = await client.getRun(runId);
  assert.equal(run.phase, RunPhase.WAITING_APPROVAL);
  const pending = run.pendingApproval;
  assert.ok(pending, "a waiting run shows its pending approval");
  return client.resolveApproval(runId, pending.approvalId, {
    approve: true,
    argsHash: pending.argsHash,
    expectedRevision: run.revision,
    comment: "ok from TypeScript",
  });
}

describe("against a real runtime", () => {
  test("getRunDiagnostics shows a parked run's pending call, and refuses unknown and bad run ids", async () => {
    const { runId, lastSeq } = await runUntilApproval();
    const diagnostics = await client.getRunDiagnostics(runId);
    assert.equal(diagnostics.runId, runId);
    assert.equal(diagnostics.phase, RunPhase.WAITING_APPROVAL);
    assert.equal(diagnostics.lastSeq, lastSeq);
    assert.equal(diagnostics.leaseOwner, "", "a run parked for a person is held by no replica");
    assert.ok(diagnostics.fencingGeneration >= 1n);
    assert.ok(diagnostics.wakeTime, "it wakes when its approval expires");
    assert.equal(diagnostics.maxFaults > 0, true);
    const [call, ...others] = diagnostics.pendingCalls;
    assert.deepEqual(others, []);
    assert.equal(call?.tool, "refund.issue");
    assert.equal(call?.state, PendingCallState.WAITING_APPROVAL);
    assert.equal(call?.attempts, 0);
    assert.equal(diagnostics.reconcile, undefined);
    assert.equal(diagnostics.waiting?.reason, WaitReason.APPROVAL, "it waits for a person");
    await assert.rejects(client.getRunDiagnostics("no-such-run"), NotFoundError);
    await assert.rejects(client.getRunDiagnostics("bad id"), InvalidArgumentError);
    await client.cancelRun(runId, { reason: "diagnosed" });
  });

  test("runAgent follows a run to its approval, resolveApproval lets it complete", async () => {
    const { runId, events, lastSeq } = await runUntilApproval();
    assert.match(runId, /\S/);
    assert.deepEqual(seqs(events), range(1n, lastSeq), "persisted events arrive in order, gapless");
    const kinds = events.map((e) => e.event.case);
    assert.equal(kinds[0], "runStarted");
    assert.ok(kinds.includes("approvalRequested"));
    const lookup = events.find((e) => e.event.case === "toolCompleted");
    assert.equal(lookup?.event.case === "toolCompleted" && lookup.event.value.tool, "orders.lookup");

    await approve(runId);
    const rest = client.streamEvents(runId, { afterSeq: lastSeq, follow: true });
    const tail = await rest.toArray();
    assert.equal(rest.ended?.phase, RunPhase.COMPLETED);
    assert.deepEqual(seqs(tail), range(lastSeq + 1n, rest.lastSeq));
    const refund = tail.find((e) => e.event.case === "toolCompleted");
    assert.equal(refund?.event.case === "toolCompleted" && refund.event.value.tool, "refund.issue");
    const resolved = tail.find((e) => e.event.case === "approvalResolved");
    assert.equal(resolved?.event.case === "approvalResolved" && resolved.event.value.comment, "ok from TypeScript");

    const run = await client.getRun(runId);
    assert.equal(run.phase, RunPhase.COMPLETED);
    assert.equal(run.output, "Refunded 30.00 for A100.");
    const page = await client.listRuns({ agentName: "refund-demo", phases: [RunPhase.COMPLETED] });
    assert.ok(page.runs.some((r) => r.runId === runId), "listRuns finds the completed run by agent and phase");
    const waiting = await client.listRuns({ agentName: "refund-demo", phases: [RunPhase.WAITING_APPROVAL] });
    assert.ok(!waiting.runs.some((r) => r.runId === runId));
  });

  test("a follower resumes after a disconnect: every event once, none missed while cut off", async () => {
    const { runId, lastSeq } = await runUntilApproval();
    const relay = await Relay.start(runtime.address);
    const viaRelay = new AgentRuntimeClient(relay.address, { env: {} });
    try {
      const reconnectErrors: string[] = [];
      const stream = viaRelay.streamEvents(runId, {
        afterSeq: 2n,
        follow: true,
        reconnect: { maxAttempts: 200, baseDelayMs: 20, maxDelayMs: 250 },
        onReconnect: (error) => reconnectErrors.push(`${error.codeName} ${error.rawMessage}`),
      });
      const received: RunEvent[] = [];
      const reading = (async () => {
        for await (const event of stream) received.push(event);
      })();
      await waitFor("the replay up to the approval", () => stream.lastSeq === lastSeq || undefined);

      relay.blocked = true;
      relay.cut("reset");
      await waitFor("a failed reconnect", () => stream.reconnects >= 2 || undefined);
      await approve(runId); // directly, while the follower is cut off
      await waitFor("the run to end", async () => ((await client.getRun(runId)).phase === RunPhase.COMPLETED) || undefined);
      relay.blocked = false;
      await reading;

      assert.equal(stream.ended?.phase, RunPhase.COMPLETED);
      assert.ok(reconnectErrors.length >= 2, "the stream really was cut off");
      const replay = await client.streamEvents(runId, { afterSeq: 2n }).toArray();
      assert.deepEqual(seqs(received), seqs(replay), "no gap and no duplicate across the disconnect");
      assert.deepEqual(
        received.filter((e) => e.seq !== 0n).map((e) => e.event.case),
        replay.map((e) => e.event.case),
      );
      assert.ok(seqs(received).at(-1)! > lastSeq, "events recorded while cut off were delivered after the resume");
    } finally {
      viaRelay.close();
      await relay.close();
    }
  });

  test("runAgent resumes after a disconnect without starting a second run; cancelRun ends it CANCELLED", async () => {
    const relay = await Relay.start(runtime.address);
    const viaRelay = new AgentRuntimeClient(relay.address, { env: {} });
    try {
      const before = (await client.listRuns({ agentName: "sleeper", pageSize: 500 })).runs.length;
      const stream = viaRelay.runAgent(
        { agentName: "sleeper", input: "nap" },
        { reconnect: { maxAttempts: 20, baseDelayMs: 20, maxDelayMs: 250 } },
      );
      const received: RunEvent[] = [];
      const reading = (async () => {
        for await (const event of stream) received.push(event);
      })();
      await waitFor("the tool call to start", () => received.some((e) => e.event.case === "toolStarted") || undefined);
      relay.cut();
      await waitFor("a reconnect", () => stream.reconnects >= 1 || undefined);

      const cancelled = await client.cancelRun(stream.runId, { reason: "enough" });
      assert.equal(cancelled.runId, stream.runId);
      await reading;

      assert.equal(stream.ended?.phase, RunPhase.CANCELLED);
      assert.deepEqual(seqs(received), range(1n, stream.lastSeq), "no gap and no duplicate across the reconnect");
      const replay = await client.streamEvents(stream.runId).toArray();
      assert.deepEqual(seqs(received), seqs(replay));
      const after = (await client.listRuns({ agentName: "sleeper", pageSize: 500 })).runs.length;
      assert.equal(after, before + 1, "the reconnect attached to the run; it did not start another");
      assert.equal((await client.getRun(stream.runId)).phase, RunPhase.CANCELLED);
    } finally {
      viaRelay.close();
      await relay.close();
    }
  });

  test("getPayload fetches a large tool result whole, checked against its reference", async () => {
    const stream = client.runAgent({ agentName: "blob", input: "make one" });
    const events = await stream.toArray();
    assert.equal(stream.ended?.phase, RunPhase.COMPLETED);
    const completed = events.find((e) => e.event.case === "toolCompleted");
    const ref = completed?.event.case === "toolCompleted" ? completed.event.value.resultRef : undefined;
    assert.ok(ref, "a result over the inline limit is stored as a payload");
    const payload = await client.getPayload(stream.runId, ref.payloadId);
    assert.equal(payload.data.length, Number(ref.sizeBytes));
    const blob = (JSON.parse(Buffer.from(payload.data).toString("utf8")) as { blob: string }).blob;
    assert.equal(blob.length, BLOB_BYTES);
  });

  test("NOT_FOUND is a NotFoundError with its ErrorInfo decoded", async () => {
    const error = await client.getRun("no-such-run").then(
      () => assert.fail("getRun of a missing run succeeded"),
      (err: unknown) => err,
    );
    assert.ok(error instanceof NotFoundError, String(error));
    assert.equal(error.codeName, "NOT_FOUND");
    assert.equal(error.reason, "RUN_NOT_FOUND");
    assert.match(error.domain, /agentrt/);
    await assert.rejects(client.cancelRun("no-such-run"), NotFoundError);
    await assert.rejects(client.streamEvents("no-such-run").toArray(), NotFoundError);
    await assert.rejects(client.getPayload("no-such-run", "0".repeat(64)), NotFoundError);
  });

  test("INVALID_ARGUMENT carries a BadRequest naming the field", async () => {
    const error = await client.getRun("").then(
      () => assert.fail("getRun of an empty id succeeded"),
      (err: unknown) => err,
    );
    assert.ok(error instanceof InvalidArgumentError, String(error));
    assert.deepEqual(
      error.fieldViolations.map((v) => v.field),
      ["run_id"],
    );
    await assert.rejects(
      client.runAgent({ agentName: "refund-demo", input: "x".repeat(5000) }).toArray(),
      (err: unknown) => err instanceof InvalidArgumentError && err.fieldViolations.some((v) => v.field === "input"),
    );
  });
});
