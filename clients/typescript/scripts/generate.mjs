// Regenerates src/gen from the repository's proto/ (and vendor/google/rpc) with buf and the
// pinned protoc-gen-es from node_modules: `npm run generate`. Offline: no remote plugins.
// `node scripts/generate.mjs --out DIR` writes DIR/src/gen instead; the drift test compares that.
import { execFileSync } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = ["generate", "--template", "buf.gen.yaml"];
const at = process.argv.indexOf("--out");
if (at >= 0) {
  const out = process.argv[at + 1];
  if (!out) throw new Error("--out needs a directory");
  args.push("--output", resolve(out));
}
execFileSync(join(root, "node_modules", ".bin", "buf"), args, { cwd: root, stdio: "inherit" });
