// The TypeScript guide's example (docs/examples/typescript), type-checked against the package's
// declarations and run as written against a real runtime.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";

import ts from "typescript";

import { REPO_ROOT, Runtime } from "./helpers/runtime.js";

const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const EXAMPLE = join(REPO_ROOT, "docs", "examples", "typescript", "refund_with_approval.ts");
const runtime = new Runtime();

before(async () => {
  await runtime.start();
});
after(async () => {
  await runtime.stop();
});

test("the guide's example type-checks against the published declarations", () => {
  const program = ts.createProgram([EXAMPLE], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: ["node"],
    typeRoots: [join(PACKAGE_ROOT, "node_modules", "@types")],
    // What `npm install @agentrt/client` resolves to: the built declarations.
    paths: { "@agentrt/client": [join(PACKAGE_ROOT, "dist", "index.d.ts")] },
  });
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  assert.deepEqual(diagnostics, []);
});

test("the guide's example runs a refund through its approval to its end", async () => {
  const js = ts.transpileModule(readFileSync(EXAMPLE, "utf8"), {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  }).outputText;
  const runnable = js.replace('"@agentrt/client"', JSON.stringify(pathToFileURL(join(PACKAGE_ROOT, "dist", "index.js")).href));
  assert.notEqual(runnable, js, "the example imports @agentrt/client");
  const script = join(runtime.dir, "docs-example.mjs");
  writeFileSync(script, runnable);
  const { stdout } = await promisify(execFile)(process.execPath, [script, runtime.address], {
    env: { PATH: process.env["PATH"] ?? "" },
    timeout: 60_000,
  });
  const lines = stdout.trim().split("\n");
  assert.equal(lines[0], "1 runStarted", stdout);
  assert.ok(lines.some((l) => l.startsWith("approving: ")), stdout);
  assert.ok(lines.some((l) => l.endsWith(" approvalResolved")), stdout);
  assert.ok(lines.includes("typed error: RUN_NOT_FOUND"), stdout);
  assert.equal(lines.at(-1), "ended: COMPLETED");
  // Stored events (seq > 0; seq 0 is the stream's own run_waiting note) are printed once each and
  // in order: the follow resumed right after the RunAgent stream.
  const seqs = lines.filter((l) => /^\d+ /.test(l)).map((l) => Number(l.split(" ")[0])).filter((seq) => seq > 0);
  assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
  assert.deepEqual(seqs, Array.from({ length: seqs.length }, (_, i) => i + 1));
});
