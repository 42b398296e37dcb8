// @agentrt/client: the TypeScript client of the agentrt runtime.
export {
  AgentRuntimeClient,
  DEFAULT_TIMEOUT_MS,
  PayloadMismatchError,
  baseUrl,
  type ClientOptions,
  type Payload,
  type StartRequest,
  type StreamOptions,
} from "./client.js";
export {
  DEFAULT_TARGET,
  ENV_CA,
  ENV_CERT,
  ENV_KEY,
  ENV_SERVER_NAME,
  ENV_TARGET,
  ENV_TLS,
  ENV_TOKEN,
  ENV_TOKEN_FILE,
  describeSecurity,
  isLoopbackTarget,
  readTokenFile,
  resolveSecurity,
  type ChannelSecurity,
  type SecurityOptions,
} from "./credentials.js";
export {
  AbortedError,
  AlreadyExistsError,
  CODE_NAMES,
  ClientError,
  CredentialsError,
  DeadlineExceededError,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  RpcError,
  UnauthenticatedError,
  UnavailableError,
  toRpcError,
  type UnknownDetail,
} from "./errors.js";
export { EventStream, isResumable, isTailMark, type ReconnectListener, type ReconnectOptions } from "./stream.js";
export type { Http2SessionOptions } from "@connectrpc/connect-node";
export * from "./gen/agentrt/runtime/v1/run_pb.js";
export * from "./gen/agentrt/runtime/v1/runtime_service_pb.js";
export * from "./gen/agentrt/toolhost/v1/tool_pb.js";
export type {
  BadRequest,
  BadRequest_FieldViolation,
  ErrorInfo,
  PreconditionFailure,
  RetryInfo,
} from "./gen/google/rpc/error_details_pb.js";
