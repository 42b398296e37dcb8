// Copies the repository's agentrt .proto files and vendor/google/rpc into ./proto so the npm package ships them
// (package.json "files"); run by `npm run build` and so by
// `prepare` (npm pack / publish and installs from a folder or git).
import { cpSync, existsSync, rmSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const source = resolve(root, "..", "..", "proto", "agentrt");
const target = join(root, "proto", "agentrt");
if (!existsSync(source)) throw new Error(`no protos at ${source}`);
rmSync(join(root, "proto"), { recursive: true, force: true });
const protoOnly = { recursive: true, filter: (path) => statSync(path).isDirectory() || path.endsWith(".proto") };
cpSync(source, target, protoOnly);
// The vendored google.rpc protos (Status, error details), for users decoding details by hand.
cpSync(join(root, "vendor", "google"), join(root, "proto", "google"), protoOnly);
