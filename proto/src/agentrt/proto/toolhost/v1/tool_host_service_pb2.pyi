from agentrt.proto.toolhost.v1 import tool_pb2 as _tool_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_tool_pb2.ToolSpec]
    def __init__(self, tools: _Optional[_Iterable[_Union[_tool_pb2.ToolSpec, _Mapping]]] = ...) -> None: ...

class InvokeToolRequest(_message.Message):
    __slots__ = ("tool", "arguments_json")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    tool: str
    arguments_json: str
    def __init__(self, tool: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class InvokeToolResponse(_message.Message):
    __slots__ = ("result_json", "error", "replayed", "deduplicated", "duplicate_of")
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_OF_FIELD_NUMBER: _ClassVar[int]
    result_json: str
    error: _tool_pb2.ToolError
    replayed: bool
    deduplicated: bool
    duplicate_of: _tool_pb2.IntentDuplicate
    def __init__(self, result_json: _Optional[str] = ..., error: _Optional[_Union[_tool_pb2.ToolError, _Mapping]] = ..., replayed: _Optional[bool] = ..., deduplicated: _Optional[bool] = ..., duplicate_of: _Optional[_Union[_tool_pb2.IntentDuplicate, _Mapping]] = ...) -> None: ...

class GetOperationRequest(_message.Message):
    __slots__ = ("idempotency_key",)
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    def __init__(self, idempotency_key: _Optional[str] = ...) -> None: ...

class GetOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: _tool_pb2.Operation
    def __init__(self, operation: _Optional[_Union[_tool_pb2.Operation, _Mapping]] = ...) -> None: ...

class CancelOperationRequest(_message.Message):
    __slots__ = ("idempotency_key", "reason")
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    reason: str
    def __init__(self, idempotency_key: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelOperationResponse(_message.Message):
    __slots__ = ("operation", "signalled")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    SIGNALLED_FIELD_NUMBER: _ClassVar[int]
    operation: _tool_pb2.Operation
    signalled: bool
    def __init__(self, operation: _Optional[_Union[_tool_pb2.Operation, _Mapping]] = ..., signalled: _Optional[bool] = ...) -> None: ...

class PreviewToolRequest(_message.Message):
    __slots__ = ("tool", "arguments_json")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    tool: str
    arguments_json: str
    def __init__(self, tool: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class PreviewToolResponse(_message.Message):
    __slots__ = ("impact_summary",)
    IMPACT_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    impact_summary: str
    def __init__(self, impact_summary: _Optional[str] = ...) -> None: ...
