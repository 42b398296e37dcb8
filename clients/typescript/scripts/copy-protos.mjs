// Copies the repository's agentrt .proto files into ./proto so the npm package ships them
// (package.json "files"); run by `npm run build` and so by `npm pack` / `npm publish`.
import { cpSync, existsSync, rmSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const source = resolve(root, "..", "..", "proto", "agentrt");
const target = join(root, "proto", "agentrt");
if (!existsSync(source)) throw new Error(`no protos at ${source}`);
rmSync(join(root, "proto"), { recursive: true, force: true });
cpSync(source, target, { recursive: true, filter: (path) => statSync(path).isDirectory() || path.endsWith(".proto") });
