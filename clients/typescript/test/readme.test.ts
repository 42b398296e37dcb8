// The README's "Calling from TypeScript" example, run as written against a real runtime.

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
const runtime = new Runtime();

before(async () => {
  await runtime.start();
});
after(async () => {
  await runtime.stop();
});

test("the README example runs a refund through its approval and decodes a NOT_FOUND", async () => {
  const readme = readFileSync(join(REPO_ROOT, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Calling from TypeScript"));
  const example = /```ts\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(example, "the README has a ```ts block under Calling from TypeScript");
  assert.ok(example.trim().split("\n").length <= 14, "the example stays short");
  const js = ts.transpileModule(example, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  }).outputText;
  const runnable = js
    .replace('"@agentrt/client"', JSON.stringify(pathToFileURL(join(PACKAGE_ROOT, "dist", "index.js")).href))
    .replace('"127.0.0.1:50051"', JSON.stringify(runtime.address));
  const script = join(runtime.dir, "readme-example.mjs");
  writeFileSync(script, runnable);
  const { stdout } = await promisify(execFile)(process.execPath, [script], { env: { PATH: process.env["PATH"] ?? "" }, timeout: 60_000 });
  const lines = stdout.trim().split("\n");
  assert.ok(lines.includes("1 runStarted"), stdout);
  assert.ok(lines.some((l) => l.endsWith(" approvalResolved")), stdout);
  assert.ok(lines.some((l) => l.endsWith(" runEnded")), stdout);
  assert.equal(lines.at(-1), "true RUN_NOT_FOUND");
});
