// The package itself: generated code matches proto/, and `npm pack` ships the .proto files.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

function files(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else out.push(relative(root, path));
    }
  };
  walk(root);
  return out.sort();
}

test("src/gen is what `npm run generate` makes from proto/ (run it after changing a .proto)", () => {
  const out = mkdtempSync(join(tmpdir(), "agentrt-ts-gen-"));
  try {
    execFileSync(process.execPath, [join(PACKAGE_ROOT, "scripts", "generate.mjs"), "--out", out], { cwd: PACKAGE_ROOT });
    const committed = join(PACKAGE_ROOT, "src", "gen");
    const fresh = join(out, "src", "gen");
    assert.deepEqual(files(fresh), files(committed), "generated files differ: run `npm run generate` in clients/typescript");
    for (const name of files(committed)) {
      const same = readFileSync(join(fresh, name), "utf8") === readFileSync(join(committed, name), "utf8");
      assert.ok(same, `src/gen/${name} is stale: run \`npm run generate\` in clients/typescript`);
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("npm pack ships the .proto files, the compiled client and its types", () => {
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const report = execFileSync(npm, ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: PACKAGE_ROOT, encoding: "utf8" });
  const packed = new Set((JSON.parse(report) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path));
  // The sources under proto/agentrt (proto/src holds the Python distribution's copies).
  const protos = files(resolve(PACKAGE_ROOT, "..", "..", "proto"))
    .filter((p) => p.endsWith(".proto"))
    .filter((p) => p.startsWith("agentrt/"));
  assert.ok(protos.length >= 4);
  for (const proto of protos) assert.ok(packed.has(join("proto", proto)), `${proto} is not in the package`);
  for (const path of ["dist/index.js", "dist/index.d.ts", "dist/gen/agentrt/runtime/v1/run_pb.js", "package.json", "README.md"]) {
    assert.ok(packed.has(path), `${path} is not in the package`);
  }
  assert.ok(![...packed].some((p) => p.startsWith("src/") || p.startsWith("test/") || p.startsWith("node_modules/")));
});
