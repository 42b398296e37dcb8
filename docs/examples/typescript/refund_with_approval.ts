// Start a run, follow its events, approve the call it pauses for, and follow it to its end.
//
// Usage: node refund_with_approval.js HOST:PORT   (a runtime started with `agentrt serve --demo`)

import { AgentRuntimeClient, NotFoundError, RunPhase, WaitReason } from "@agentrt/client";

async function main(target: string): Promise<number> {
  // TLS, mTLS and tokens come from options ({ caFile, certFile, keyFile, tokenFile }) or AGENTRT_*.
  const client = new AgentRuntimeClient(target);
  try {
    // RunAgent starts the run and streams its events until it ends or pauses. A pause ends the
    // stream and says what the run waits for (stream.waiting), without storing anything.
    const stream = client.runAgent({ agentName: "refund-demo", input: "Please refund order A100, it arrived broken." });
    for await (const event of stream) console.log(`${event.seq} ${event.event.case}`);

    let run = await client.getRun(stream.runId);
    if (stream.waiting?.reason === WaitReason.APPROVAL && run.pendingApproval) {
      const pending = run.pendingApproval;
      console.log("approving:", pending.impactSummary);
      // The hash and the revision say what was approved: exactly the call that was shown.
      await client.resolveApproval(run.runId, pending.approvalId, {
        approve: true,
        argsHash: pending.argsHash,
        expectedRevision: run.revision,
      });
      // Follow on from the last event seen: nothing twice, nothing missed.
      for await (const event of client.streamEvents(run.runId, { afterSeq: stream.lastSeq, follow: true })) {
        console.log(`${event.seq} ${event.event.case}`);
      }
      run = await client.getRun(run.runId);
    }

    // Errors are typed by status, with the server's google.rpc details decoded.
    try {
      await client.getRun("no-such-run");
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
      console.log("typed error:", error.reason);
    }

    console.log("ended:", RunPhase[run.phase]);
    return run.phase === RunPhase.COMPLETED ? 0 : 1;
  } finally {
    client.close();
  }
}

process.exitCode = await main(process.argv[2] ?? "127.0.0.1:50051");
