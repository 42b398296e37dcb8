// How a client reaches the runtime safely: TLS files, a bearer token, and their AGENTRT_* defaults.
//
// Mirrors the Python client (clients/_credentials.py): every option left undefined falls back
// to its environment variable, and an empty string turns it off even when the variable is set.
// Files are read once, when the client is made, so a wrong path fails at once, naming the file.
// A token travels as `authorization: Bearer <token>`: over TLS, or in clear only to a loopback
// target. The token never appears in an error message or in `describe()`.

import { readFileSync } from "node:fs";
import { isIP } from "node:net";

import { CredentialsError } from "./errors.js";

export const ENV_TARGET = "AGENTRT_TARGET";
export const ENV_CA = "AGENTRT_CA";
export const ENV_CERT = "AGENTRT_CERT";
export const ENV_KEY = "AGENTRT_KEY";
export const ENV_TOKEN = "AGENTRT_TOKEN";
export const ENV_TOKEN_FILE = "AGENTRT_TOKEN_FILE";
export const ENV_SERVER_NAME = "AGENTRT_SERVER_NAME";
export const ENV_TLS = "AGENTRT_TLS";

/** Where clients connect when no target is given and AGENTRT_TARGET is unset. */
export const DEFAULT_TARGET = "127.0.0.1:50051";

/** Security options of a client; each left undefined comes from its AGENTRT_* variable. */
export interface SecurityOptions {
  /** PEM CA file the server's certificate is checked against; turns TLS on (AGENTRT_CA). */
  caFile?: string;
  /** PEM client certificate file, for mTLS (AGENTRT_CERT). */
  certFile?: string;
  /** Its PEM private key file (AGENTRT_KEY). */
  keyFile?: string;
  /** Bearer token (AGENTRT_TOKEN). */
  token?: string;
  /** File whose first line is the bearer token (AGENTRT_TOKEN_FILE). */
  tokenFile?: string;
  /** Name the server's certificate must carry when the target's host is not it (AGENTRT_SERVER_NAME). */
  serverName?: string;
  /** Force TLS on (system roots without caFile) or off (AGENTRT_TLS); default: on when a TLS file is given. */
  tls?: boolean;
  /** The environment to read; process.env when undefined. */
  env?: Readonly<Record<string, string | undefined>>;
}

/** What a client's connection is made with, files read. */
export interface ChannelSecurity {
  readonly target: string;
  readonly tls: boolean;
  readonly ca?: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
  readonly serverName: string;
  readonly token: string;
}

const TRUE = new Set(["1", "true", "yes", "on"]);
const FALSE = new Set(["0", "false", "no", "off"]);

/**
 * Resolves a client's security from options, then AGENTRT_* variables.
 *
 * @throws CredentialsError when a file cannot be used, options conflict, or a token would be
 *   sent in clear to a non-loopback target.
 */
export function resolveSecurity(target: string, options: SecurityOptions = {}): ChannelSecurity {
  const env = options.env ?? process.env;
  const ca = pick(options.caFile, env, ENV_CA);
  const cert = pick(options.certFile, env, ENV_CERT);
  const key = pick(options.keyFile, env, ENV_KEY);
  const serverName = pick(options.serverName, env, ENV_SERVER_NAME);
  let tls = options.tls ?? envTls(env);
  if (Boolean(cert) !== Boolean(key)) {
    const [given, missing] = cert ? ["client certificate", "key"] : ["client key", "certificate"];
    throw new CredentialsError(
      `a ${given} needs its ${missing} too: give both certFile and keyFile (${ENV_CERT} and ${ENV_KEY}), or neither`,
    );
  }
  if (tls === undefined) {
    tls = Boolean(ca || cert);
  } else if (!tls && (ca || cert)) {
    throw new CredentialsError("TLS is turned off but a CA or client certificate is given");
  }
  if (serverName && !tls) {
    throw new CredentialsError("a TLS server name is given but the connection is plaintext: give a CA");
  }
  const token = resolveToken(options, env);
  if (token && !tls && !isLoopbackTarget(target)) {
    throw new CredentialsError(
      `refusing to send a token in clear to ${target}: use TLS (caFile / ${ENV_CA}), or connect to a loopback address`,
    );
  }
  return {
    target,
    tls,
    ca: ca ? readPem(ca, "CA") : undefined,
    cert: cert ? readPem(cert, "client certificate") : undefined,
    key: key ? readPem(key, "client key") : undefined,
    serverName,
    token,
  };
}

/** A short, secret-free summary, e.g. `mtls token` or `plaintext`. */
export function describeSecurity(security: ChannelSecurity): string {
  const parts = [security.cert ? "mtls" : security.tls ? "tls" : "plaintext"];
  if (security.token) parts.push("token");
  return parts.join(" ");
}

function pick(value: string | undefined, env: SecurityOptions["env"] & object, name: string): string {
  return value !== undefined ? value : (env[name] ?? "");
}

function envTls(env: SecurityOptions["env"] & object): boolean | undefined {
  const raw = (env[ENV_TLS] ?? "").trim().toLowerCase();
  if (!raw) return undefined; // unset: TLS follows the files given
  if (TRUE.has(raw)) return true;
  if (FALSE.has(raw)) return false;
  throw new CredentialsError(`${ENV_TLS} must be 1/true/yes/on or 0/false/no/off, not ${JSON.stringify(raw.slice(0, 16))}`);
}

function resolveToken(options: SecurityOptions, env: SecurityOptions["env"] & object): string {
  // Options win over the environment; at one level, both a token and a file is ambiguous.
  let value: string;
  let path: string;
  let source: string;
  if (options.token !== undefined || options.tokenFile !== undefined) {
    [value, path, source] = [options.token ?? "", options.tokenFile ?? "", "token and tokenFile"];
  } else {
    [value, path, source] = [env[ENV_TOKEN] ?? "", env[ENV_TOKEN_FILE] ?? "", `${ENV_TOKEN} and ${ENV_TOKEN_FILE}`];
  }
  if (value && path) throw new CredentialsError(`give one of ${source}, not both`);
  if (path) return readTokenFile(path);
  return value.trim() ? checkToken(value.trim(), "the token") : "";
}

/** The token on the first line of `path`, stripped of surrounding whitespace. */
export function readTokenFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new CredentialsError(`cannot read token file ${path}: ${errnoText(err)}`);
  }
  const first = (text.split("\n", 1)[0] ?? "").trim();
  if (!first) throw new CredentialsError(`token file ${path} has no token on its first line`);
  return checkToken(first, `the token in ${path}`);
}

function checkToken(token: string, what: string): string {
  // A header value must be visible ASCII; say so without echoing the secret.
  if (!/^[\x21-\x7e]+$/.test(token)) {
    throw new CredentialsError(`${what} has characters not allowed in a header (visible ASCII only)`);
  }
  return token;
}

function readPem(path: string, what: string): Buffer {
  let data: Buffer;
  try {
    data = readFileSync(path);
  } catch (err) {
    throw new CredentialsError(`cannot read ${what} file ${path}: ${errnoText(err)}`);
  }
  if (!data.includes("-----BEGIN")) throw new CredentialsError(`${what} file ${path} is not PEM`);
  return data;
}

function errnoText(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  return code ?? "unreadable";
}

/**
 * True when every address `target` names is on this machine: loopback IPs, `localhost`.
 * Accepts `host:port`, `[v6]:port`, and the gRPC forms `dns:host:port` and `ipv4:`/`ipv6:` lists.
 */
export function isLoopbackTarget(target: string): boolean {
  let rest = target;
  if (rest.startsWith("dns:")) {
    rest = rest.slice(4);
    if (rest.startsWith("//")) rest = rest.slice(2).split("/").slice(1).join("/"); // drop the DNS authority
  } else if (rest.startsWith("ipv4:") || rest.startsWith("ipv6:")) {
    return rest
      .slice(5)
      .split(",")
      .every((a) => isLoopbackHost(hostOf(a)));
  } else if (rest.includes("://")) {
    return false;
  }
  return isLoopbackHost(hostOf(rest));
}

/** The host part of `host:port`, `[v6]:port`, or a bare host. */
export function hostOf(address: string): string {
  if (address.startsWith("[")) {
    const end = address.indexOf("]");
    return end >= 0 ? address.slice(1, end) : address.slice(1);
  }
  const colons = address.split(":").length - 1;
  if (colons === 1) return address.slice(0, address.indexOf(":"));
  return address; // no port, or a bare IPv6 address
}

function isLoopbackHost(host: string): boolean {
  if (host === "localhost") return true;
  const kind = isIP(host);
  if (kind === 4) return host.startsWith("127.");
  if (kind === 6) return host === "::1" || /^(0{0,4}:){7}0{0,3}1$/.test(host) || host === "::ffff:127.0.0.1";
  return false;
}
