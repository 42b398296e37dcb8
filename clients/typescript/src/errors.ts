// Errors raised by the agentrt TypeScript client.
//
// Every failed call throws an RpcError carrying the gRPC status code, the message and the
// google.rpc details the runtime sent in the `grpc-status-details-bin` trailer, decoded:
// ErrorInfo (reason, domain, metadata), BadRequest (field violations), RetryInfo, ... Catch
// RpcError and look at `.code` / `.reason`, or test for a subclass by code.
//
//   ClientError
//    ├── CredentialsError             TLS files or token unusable (thrown when a client is made)
//    └── RpcError                     any non-OK gRPC status
//         ├── InvalidArgumentError    INVALID_ARGUMENT (see badRequest)
//         ├── NotFoundError           NOT_FOUND
//         ├── AlreadyExistsError      ALREADY_EXISTS
//         ├── FailedPreconditionError FAILED_PRECONDITION (see preconditionFailure)
//         ├── AbortedError            ABORTED (a concurrent change won; re-read and retry)
//         ├── ResourceExhaustedError  RESOURCE_EXHAUSTED (see retryInfo)
//         ├── DeadlineExceededError   DEADLINE_EXCEEDED
//         ├── UnavailableError        UNAVAILABLE (server down or unreachable)
//         ├── PermissionDeniedError   PERMISSION_DENIED
//         └── UnauthenticatedError    UNAUTHENTICATED

import type { DescMessage, Message } from "@bufbuild/protobuf";
import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import {
  BadRequestSchema,
  DebugInfoSchema,
  ErrorInfoSchema,
  HelpSchema,
  LocalizedMessageSchema,
  PreconditionFailureSchema,
  QuotaFailureSchema,
  RequestInfoSchema,
  ResourceInfoSchema,
  RetryInfoSchema,
} from "./gen/google/rpc/error_details_pb.js";
import type {
  BadRequest,
  BadRequest_FieldViolation,
  ErrorInfo,
  PreconditionFailure,
  RetryInfo,
} from "./gen/google/rpc/error_details_pb.js";

/** gRPC status names by code, as the runtime's documentation spells them. */
export const CODE_NAMES: Readonly<Record<number, string>> = {
  0: "OK",
  1: "CANCELLED",
  2: "UNKNOWN",
  3: "INVALID_ARGUMENT",
  4: "DEADLINE_EXCEEDED",
  5: "NOT_FOUND",
  6: "ALREADY_EXISTS",
  7: "PERMISSION_DENIED",
  8: "RESOURCE_EXHAUSTED",
  9: "FAILED_PRECONDITION",
  10: "ABORTED",
  11: "OUT_OF_RANGE",
  12: "UNIMPLEMENTED",
  13: "INTERNAL",
  14: "UNAVAILABLE",
  15: "DATA_LOSS",
  16: "UNAUTHENTICATED",
};

// Detail types decoded from google.rpc.Status.details; any other stays as its type name and bytes.
const DETAIL_SCHEMAS: readonly DescMessage[] = [
  ErrorInfoSchema,
  BadRequestSchema,
  PreconditionFailureSchema,
  RetryInfoSchema,
  QuotaFailureSchema,
  ResourceInfoSchema,
  RequestInfoSchema,
  DebugInfoSchema,
  HelpSchema,
  LocalizedMessageSchema,
];

/** A status detail of a type this client does not know. */
export interface UnknownDetail {
  readonly $typeName: "unknown";
  readonly typeUrl: string;
  readonly value: Uint8Array;
}

/** Base class of every error the agentrt client throws. */
export class ClientError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The client's TLS files or token cannot be used; the message names the file or option, never the token. */
export class CredentialsError extends ClientError {}

/** A call to the runtime ended with a non-OK gRPC status. */
export class RpcError extends ClientError {
  /** The gRPC status code (Connect's Code enum has the same numbers). */
  readonly code: Code;
  /** The status message as the server sent it. */
  readonly rawMessage: string;
  /** The status details, decoded: ErrorInfo, BadRequest, PreconditionFailure, RetryInfo, ... */
  readonly details: readonly (Message | UnknownDetail)[];
  /** Trailing metadata of the failed call. */
  readonly trailers: Headers;

  constructor(code: Code, rawMessage: string, details: readonly (Message | UnknownDetail)[], trailers: Headers, cause?: unknown) {
    super(`${CODE_NAMES[code] ?? String(code)}: ${rawMessage}`, { cause });
    this.code = code;
    this.rawMessage = rawMessage;
    this.details = details;
    this.trailers = trailers;
  }

  /** The status name, e.g. `NOT_FOUND`. */
  get codeName(): string {
    return CODE_NAMES[this.code] ?? String(this.code);
  }

  /** The first detail of the given type, or undefined. */
  detail<T extends Message>(typeName: T["$typeName"]): T | undefined {
    return this.details.find((d): d is T => d.$typeName === typeName);
  }

  /** The ErrorInfo detail, or undefined. */
  get errorInfo(): ErrorInfo | undefined {
    return this.detail<ErrorInfo>("google.rpc.ErrorInfo");
  }

  /** The stable ErrorInfo reason (e.g. `RUN_NOT_FOUND`), "" when absent. */
  get reason(): string {
    return this.errorInfo?.reason ?? "";
  }

  /** The ErrorInfo domain, "" when absent. */
  get domain(): string {
    return this.errorInfo?.domain ?? "";
  }

  /** The ErrorInfo metadata, empty when absent. */
  get metadata(): Readonly<Record<string, string>> {
    return this.errorInfo?.metadata ?? {};
  }

  /** The BadRequest detail, or undefined. */
  get badRequest(): BadRequest | undefined {
    return this.detail<BadRequest>("google.rpc.BadRequest");
  }

  /** The BadRequest field violations (field path and description), empty when absent. */
  get fieldViolations(): readonly BadRequest_FieldViolation[] {
    return this.badRequest?.fieldViolations ?? [];
  }

  /** The PreconditionFailure detail, or undefined. */
  get preconditionFailure(): PreconditionFailure | undefined {
    return this.detail<PreconditionFailure>("google.rpc.PreconditionFailure");
  }

  /** The RetryInfo detail, or undefined. */
  get retryInfo(): RetryInfo | undefined {
    return this.detail<RetryInfo>("google.rpc.RetryInfo");
  }

  /** How long the server asks the caller to wait before retrying, in ms; undefined without RetryInfo. */
  get retryDelayMs(): number | undefined {
    const delay = this.retryInfo?.retryDelay;
    if (delay === undefined) return undefined;
    return Number(delay.seconds) * 1000 + Math.round(delay.nanos / 1e6);
  }
}

/** INVALID_ARGUMENT: the request is malformed; field violations are in `fieldViolations`. */
export class InvalidArgumentError extends RpcError {}
/** NOT_FOUND: the run (or agent, approval, payload) does not exist, or is another tenant's. */
export class NotFoundError extends RpcError {}
/** ALREADY_EXISTS: e.g. a request key reused with a different request. */
export class AlreadyExistsError extends RpcError {}
/** FAILED_PRECONDITION: the run is not in a state that allows the call. */
export class FailedPreconditionError extends RpcError {}
/** ABORTED: a concurrent change won (e.g. a stale expectedRevision); re-read and retry. */
export class AbortedError extends RpcError {}
/** RESOURCE_EXHAUSTED: a limit was hit; `retryDelayMs` may say when to retry. */
export class ResourceExhaustedError extends RpcError {}
/** DEADLINE_EXCEEDED: the call's timeout passed. */
export class DeadlineExceededError extends RpcError {}
/** UNAVAILABLE: the server is down, unreachable or shutting down. */
export class UnavailableError extends RpcError {}
/** PERMISSION_DENIED: the caller may not do this. */
export class PermissionDeniedError extends RpcError {}
/** UNAUTHENTICATED: the caller's credentials are missing or invalid. */
export class UnauthenticatedError extends RpcError {}

type RpcErrorClass = new (
  code: Code,
  rawMessage: string,
  details: readonly (Message | UnknownDetail)[],
  trailers: Headers,
  cause?: unknown,
) => RpcError;

const BY_CODE: ReadonlyMap<Code, RpcErrorClass> = new Map<Code, RpcErrorClass>([
  [Code.InvalidArgument, InvalidArgumentError],
  [Code.NotFound, NotFoundError],
  [Code.AlreadyExists, AlreadyExistsError],
  [Code.FailedPrecondition, FailedPreconditionError],
  [Code.Aborted, AbortedError],
  [Code.ResourceExhausted, ResourceExhaustedError],
  [Code.DeadlineExceeded, DeadlineExceededError],
  [Code.Unavailable, UnavailableError],
  [Code.PermissionDenied, PermissionDeniedError],
  [Code.Unauthenticated, UnauthenticatedError],
]);

/** Converts whatever a Connect call threw into the matching RpcError subclass (ClientErrors pass through). */
export function toRpcError(err: unknown): ClientError {
  if (err instanceof ClientError) return err;
  const connect = ConnectError.from(err);
  const details = connect.details.map(decodeDetail);
  const cls = BY_CODE.get(connect.code) ?? RpcError;
  return new cls(connect.code, connect.rawMessage, details, connect.metadata, err);
}

function decodeDetail(detail: ConnectError["details"][number]): Message | UnknownDetail {
  if ("desc" in detail) {
    // An outgoing detail (made locally); not something a server sent.
    return { $typeName: "unknown", typeUrl: detail.desc.typeName, value: new Uint8Array() };
  }
  const schema = DETAIL_SCHEMAS.find((s) => s.typeName === detail.type);
  if (schema === undefined) return { $typeName: "unknown", typeUrl: detail.type, value: detail.value };
  try {
    return fromBinary(schema, detail.value);
  } catch {
    return { $typeName: "unknown", typeUrl: detail.type, value: detail.value };
  }
}
