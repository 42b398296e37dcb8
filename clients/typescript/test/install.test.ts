// `npm install <this folder>` into a fresh npm project gives a working package: compiled code,
// the google.rpc protos, and this README's first example runs as written against a real runtime.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import ts from "typescript";

import { Runtime } from "./helpers/runtime.js";

const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const run = promisify(execFile);
const runtime = new Runtime();

before(async () => {
  await runtime.start();
});
after(async () => {
  await runtime.stop();
});

test("npm install of the folder into a fresh project imports and runs the README example", async () => {
  const project = mkdtempSync(join(tmpdir(), "agentrt-ts-install-"));
  try {
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "scratch", version: "1.0.0", type: "module" }));
    const npm = process.platform === "win32" ? "npm.cmd" : "npm";
    // --prefer-offline: the dependencies are usually in the npm cache already (npm ci ran).
    await run(npm, ["install", "--no-audit", "--no-fund", "--prefer-offline", PACKAGE_ROOT], { cwd: project, timeout: 120_000 });
    const installed = join(project, "node_modules", "@agentrt", "client");
    for (const path of ["dist/index.js", "proto/google/rpc/status.proto", "proto/google/rpc/error_details.proto"]) {
      assert.ok(existsSync(join(installed, path)), `${path} is not in the installed package`);
    }
    const readme = readFileSync(join(PACKAGE_ROOT, "README.md"), "utf8");
    const example = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    assert.ok(example, "the README has a ```ts example");
    const js = ts.transpileModule(example, {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    }).outputText;
    // Only the address changes: "@agentrt/client" resolves through the scratch project's node_modules.
    const script = join(project, "example.mjs");
    writeFileSync(script, js.replace('"127.0.0.1:50051"', JSON.stringify(runtime.address)));
    const { stdout } = await run(process.execPath, [script], { cwd: project, env: { PATH: process.env["PATH"] ?? "" }, timeout: 60_000 });
    assert.ok(stdout.trim().split("\n").includes("1 runStarted"), stdout);
  } finally {
    rmSync(project, { recursive: true, force: true });
  }
});
