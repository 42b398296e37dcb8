// Starts a real agentrt runtime (which spawns a real tool host) for the tests, over loopback.
//
// The Python side is reached through three constants below: PYTHON (the interpreter, from
// AGENTRT_PYTHON, which the Makefile sets), RUNTIME_MODULE (`python -m` entry of the runtime)
// and PKI_MODULE (the dev PKI helper). When a module moves, change its constant only.

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (clients/typescript/build-test/test/helpers -> ../../../../..). */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "..");

/** The Python interpreter of the project's virtualenv. */
export const PYTHON = process.env["AGENTRT_PYTHON"] || join(REPO_ROOT, ".venv", "bin", "python");

/** `python -m <this>` serves the runtime; it prints READY_PREFIX + address when it listens. */
export const RUNTIME_MODULE = "agentrt.server";
const READY_PREFIX = "agentrt-runtime listening on ";
/** Where the dev PKI helper lives (`generate_dev_pki`). */
export const PKI_MODULE = "agentrt.toolhost.security";

/** The environment of every Python child: the repository's code first, whatever is installed. */
function pythonEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, PYTHONPATH: [REPO_ROOT, process.env["PYTHONPATH"]].filter(Boolean).join(":") };
  for (const name of Object.keys(env)) {
    // The client's own settings must not leak into the server (AGENTRT_* overrides its config).
    if (name.startsWith("AGENTRT_")) delete env[name];
  }
  return env;
}

/** Files of a throwaway PKI made by the project's dev helper: a CA, a server and a client certificate. */
export interface DevPki {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

/** Makes a dev PKI under `dir` for 127.0.0.1 and localhost, with one client certificate. */
export function devPki(dir: string): DevPki {
  const code = [
    "import json, sys",
    "from pathlib import Path",
    `from ${PKI_MODULE} import generate_dev_pki`,
    "pki = generate_dev_pki(Path(sys.argv[1]), hosts=('127.0.0.1', 'localhost'), clients=('ts-client',))",
    "cert, key = pki.client_files['ts-client']",
    "print(json.dumps({'ca': str(pki.ca_file), 'serverCert': str(pki.server_cert_file),",
    "  'serverKey': str(pki.server_key_file), 'clientCert': str(cert), 'clientKey': str(key)}))",
  ].join("\n");
  return JSON.parse(pythonSnippet(code, [dir])) as DevPki;
}

/** Runs a short Python program with the project on its path; returns its stdout. */
export function pythonSnippet(code: string, args: string[] = []): string {
  return execFileSync(PYTHON, ["-c", code, ...args], { env: pythonEnv(), encoding: "utf8" });
}

/** Plugin modules the spawned tool host serves. */
export const TOOL_PLUGINS = ["agentrt.plugins.demo_tools", "agentrt.plugins.blob_tools"];
/** Size of the blob the `blob` agent's tool returns: over the 64 KiB inline limit, so stored as a payload. */
export const BLOB_BYTES = 100_000;

/** Scripted model steps of the refund agent: a read, then a refund over the policy's limit (approval). */
const REFUND_STEPS = [
  { text: "Looking up the order.", tool_calls: [{ tool: "orders.lookup", arguments: { order_id: "A100" } }] },
  {
    text: "Refunding.",
    tool_calls: [{ tool: "refund.issue", arguments: { order_id: "A100", amount: 30.0, reason: "broken" } }],
  },
  { text: "Refunded 30.00 for A100." },
];
const BLOB = [{ text: "making", tool_calls: [{ tool: "blob.make", arguments: { size_bytes: BLOB_BYTES } }] }, { text: "made" }];
const NAP = { text: "sleeping", tool_calls: [{ tool: "sleep.wait", arguments: { seconds: 30 } }] };

function toml(value: unknown): string {
  // JSON scalars and arrays are TOML; objects become inline tables with quoted keys.
  if (Array.isArray(value)) return `[${value.map(toml).join(", ")}]`;
  if (value !== null && typeof value === "object") {
    return `{${Object.entries(value)
      .map(([k, v]) => `${JSON.stringify(k)} = ${toml(v)}`)
      .join(", ")}}`;
  }
  return JSON.stringify(value);
}

function agent(name: string, steps: unknown[], tools: string[], budgets: Record<string, number>, extra = ""): string {
  return (
    `[agents.${JSON.stringify(name)}]\ninstructions = "test agent"\ntools = ${toml(tools)}\n` +
    `model = { provider = "scripted", options = { steps = ${toml(steps)} } }\nbudgets = ${toml(budgets)}\n${extra}`
  );
}

/** Extra TOML for the runtime's configuration (e.g. [tls] and [auth] tables). */
export interface RuntimeOptions {
  extraToml?: string;
}

/** A runtime process serving on a loopback port, with its own SQLite file and a spawned tool host. */
export class Runtime {
  readonly dir: string;
  address = "";
  private child: ChildProcess | undefined;
  private stderr = "";

  constructor() {
    this.dir = mkdtempSync(join(tmpdir(), "agentrt-ts-"));
  }

  /** Writes the configuration: agents `refund-demo` (as in the README; pauses for approval), `sleeper` (a 30 s tool call), `blob` (a large result). */
  configure(options: RuntimeOptions = {}): string {
    const text =
      `db_url = ${JSON.stringify(`sqlite:///${join(this.dir, "agentrt.sqlite")}`)}\n` +
      `data_dir = ${JSON.stringify(join(this.dir, "data"))}\n` +
      `lease_ttl_s = 3.0\npoll_interval_s = 0.2\ngrace_s = 1.0\n` +
      `[[tool_hosts]]\nname = "local"\nspawn = true\nplugins = ${toml(TOOL_PLUGINS)}\n` +
      `[limits]\nmax_input_bytes = 2048\n` +
      agent("refund-demo", REFUND_STEPS, ["orders.lookup", "refund.issue"], { max_model_steps: 6, timeout_s: 60 }) +
      `approvals = { options = { refund_limit = 25 } }\n` +
      agent("sleeper", [NAP, NAP, { text: "woke" }], ["sleep.wait"], { timeout_s: 120 }) +
      agent("blob", BLOB, ["blob.make"], { timeout_s: 60 }) +
      (options.extraToml ?? "");
    const path = join(this.dir, "agentrt.toml");
    writeFileSync(path, text);
    return path;
  }

  /** Starts the runtime and resolves with its address once it listens (at most `timeoutMs`). */
  async start(options: RuntimeOptions = {}, timeoutMs = 60_000): Promise<string> {
    const config = this.configure(options);
    const child = spawn(PYTHON, ["-m", RUNTIME_MODULE, "--config", config, "--listen", "127.0.0.1:0"], {
      cwd: this.dir,
      env: pythonEnv(),
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child = child;
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      this.stderr = (this.stderr + chunk).slice(-8000);
    });
    this.address = await new Promise<string>((resolveReady, reject) => {
      let buffer = "";
      const timer = setTimeout(() => reject(new Error(`runtime did not start in ${timeoutMs} ms:\n${this.stderr}`)), timeoutMs);
      child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
        buffer += chunk;
        for (const line of buffer.split("\n")) {
          if (line.startsWith(READY_PREFIX)) {
            clearTimeout(timer);
            resolveReady(line.slice(READY_PREFIX.length).trim());
          }
        }
      });
      child.on("error", (err) => {
        clearTimeout(timer);
        reject(new Error(`cannot start ${PYTHON} (set AGENTRT_PYTHON to the project's Python): ${err.message}`));
      });
      child.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`runtime exited with ${code} before listening:\n${this.stderr}`));
      });
    });
    return this.address;
  }

  /** SIGTERM, then SIGKILL after `graceMs`; removes the directory. */
  async stop(graceMs = 15_000): Promise<void> {
    const child = this.child;
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((done) => child.once("exit", () => done()));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(timer);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
