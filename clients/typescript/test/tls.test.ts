// TLS, mTLS and bearer tokens against a real runtime that requires them, and a RetryInfo it sends.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  AgentRuntimeClient,
  type ClientOptions,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  RpcError,
  UnauthenticatedError,
  WaitReason,
} from "../src/index.js";
import { type DevPki, Runtime, devPki } from "./helpers/runtime.js";

const TOKEN = "ts-test-token-0123456789";
const runtime = new Runtime();
let pki: DevPki;
let tokenFile: string;
const clients: AgentRuntimeClient[] = [];

function connect(options: ClientOptions, target = runtime.address): AgentRuntimeClient {
  const client = new AgentRuntimeClient(target, { env: {}, ...options });
  clients.push(client);
  return client;
}

before(async () => {
  pki = devPki(join(runtime.dir, "pki"));
  tokenFile = join(runtime.dir, "alice.token");
  writeFileSync(tokenFile, `${TOKEN}\n`);
  const tokens = join(runtime.dir, "tokens.toml");
  const sha = createHash("sha256").update(TOKEN).digest("hex");
  writeFileSync(tokens, `[[tokens]]\nsha256 = "${sha}"\nsubject = "alice"\ntenant = "acme"\nroles = ["runner", "approver"]\n`);
  await runtime.start({
    extraToml:
      `[tls]\ncert_file = ${JSON.stringify(pki.serverCert)}\nkey_file = ${JSON.stringify(pki.serverKey)}\n` +
      `client_ca_file = ${JSON.stringify(pki.ca)}\n` +
      `[auth]\ntokens_file = ${JSON.stringify(tokens)}\n` +
      `[admission]\nmax_active_runs_per_tenant = 1\nretry_after_s = 1.5\n`,
  });
});

after(async () => {
  for (const client of clients) client.close();
  await runtime.stop();
});

describe("a runtime with mTLS and tokens", () => {
  test("a client with the CA, its certificate and a token file (from AGENTRT_* variables) is served", async () => {
    const client = connect({
      env: { AGENTRT_CA: pki.ca, AGENTRT_CERT: pki.clientCert, AGENTRT_KEY: pki.clientKey, AGENTRT_TOKEN_FILE: tokenFile },
    });
    assert.equal(client.security, "mtls token");
    const stream = client.runAgent({ agentName: "refund-demo", input: "refund A100" });
    await stream.toArray();
    assert.equal(stream.waiting?.reason, WaitReason.APPROVAL);
    const run = await client.getRun(stream.runId);
    assert.equal(run.tenantId, "acme");
    assert.equal(run.createdBy, "alice");

    // The tenant's one active run is taken: the next start is refused with a RetryInfo.
    const refused = await client.runAgent({ agentName: "refund-demo", input: "again" }).toArray().then(
      () => assert.fail("a second active run was admitted"),
      (err: unknown) => err,
    );
    assert.ok(refused instanceof ResourceExhaustedError, String(refused));
    assert.equal(refused.reason, "TOO_MANY_ACTIVE_RUNS");
    assert.equal(refused.retryDelayMs, 1500);
    await client.cancelRun(stream.runId, { reason: "done" });
  });

  test("serverName checks the certificate under another name than the target's host", async () => {
    const client = connect({ caFile: pki.ca, certFile: pki.clientCert, keyFile: pki.clientKey, token: TOKEN, serverName: "localhost" });
    await assert.rejects(client.getRun("no-such-run"), NotFoundError);
  });

  test("getRunDiagnostics needs the operator role: a runner and approver is PERMISSION_DENIED", async () => {
    const client = connect({ caFile: pki.ca, certFile: pki.clientCert, keyFile: pki.clientKey, token: TOKEN });
    const refused = await client.getRunDiagnostics("any-run").then(
      () => assert.fail("a runner was shown diagnostics"),
      (err: unknown) => err,
    );
    assert.ok(refused instanceof PermissionDeniedError, String(refused));
    assert.equal(refused.reason, "MISSING_ROLE");
  });

  test("without a token, or with a wrong one, calls are UNAUTHENTICATED", async () => {
    const anonymous = connect({ caFile: pki.ca, certFile: pki.clientCert, keyFile: pki.clientKey });
    await assert.rejects(anonymous.getRun("no-such-run"), UnauthenticatedError);
    const wrong = connect({ caFile: pki.ca, certFile: pki.clientCert, keyFile: pki.clientKey, token: "not-the-token" });
    const error = await wrong.listRuns().then(
      () => assert.fail("a wrong token was accepted"),
      (err: unknown) => err,
    );
    assert.ok(error instanceof UnauthenticatedError, String(error));
    assert.ok(!error.message.includes("not-the-token"), "the error does not echo the token");
  });

  test("a client that does not trust the server's CA, or shows no certificate, cannot connect", async () => {
    const untrusting = connect({ tls: true, certFile: pki.clientCert, keyFile: pki.clientKey, token: TOKEN });
    await assert.rejects(untrusting.getRun("x"), (err: unknown) => err instanceof RpcError && /certificate/i.test(err.message));
    const noCert = connect({ caFile: pki.ca, token: TOKEN });
    await assert.rejects(noCert.getRun("x"), RpcError);
    const plaintext = connect({ token: TOKEN });
    await assert.rejects(plaintext.getRun("x"), RpcError);
  });
});
