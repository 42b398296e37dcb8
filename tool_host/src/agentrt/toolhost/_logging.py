"""Structured, redacted logs for the tool host and the runtime (both import them from here).

Both processes log one line per record to stderr, as text (the default) or as JSON
(``--log-format json``). A JSON line holds ``ts``, ``level``, ``logger``, ``message``, then the
ids of what was being done, ``run_id``, ``tenant`` and ``call_id``, set through contextvars by
whoever drives a run or serves a call (:func:`log_fields`, :func:`bind_log_fields`), and
``trace_id`` and ``span_id`` from the current OpenTelemetry span (API only: without a span, or
without ``opentelemetry-api``, they are left out). Fields passed as ``extra=`` follow.

Nothing a line carries is trusted to be clean: the message, the exception text and every extra
go through one :class:`Redactor`, which takes out the secrets the process registered
(:func:`register_secret`: API keys and the like, exactly, wherever they appear), strings shaped
like credentials (JWTs and call grants, ``Bearer`` tokens, ``sk-``/``ghp_``-style API keys,
private key blocks, passwords in URLs), and the values of sensitively named fields, whether an
extra's key or a ``name=value`` in text.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType, TracebackType
from typing import IO, Any, Literal

try:
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - the tool SDK installs without the otel extra
    _trace = None  # type: ignore[assignment]

__all__ = [
    "CONTEXT_FIELDS",
    "FORMAT_ENV",
    "REDACTED",
    "JsonFormatter",
    "LogFormat",
    "Redactor",
    "TextFormatter",
    "bind_log_fields",
    "check_level",
    "configure_logging",
    "current_log_fields",
    "log_fields",
    "parse_level_spec",
    "redactor",
    "register_secret",
    "resolve_format",
]

LogFormat = Literal["json", "text"]
FORMAT_ENV = "AGENTRT_LOG_FORMAT"
REDACTED = "[redacted]"
CONTEXT_FIELDS = ("run_id", "tenant", "call_id")

_NO_FIELDS: Mapping[str, str] = MappingProxyType({})
_FIELDS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "agentrt_log_fields", default=_NO_FIELDS
)


def current_log_fields() -> Mapping[str, str]:
    """The ids the current context logs with (``run_id``, ``tenant``, ``call_id``)."""
    return _FIELDS.get()


def bind_log_fields(**fields: str) -> contextvars.Token[Mapping[str, str]]:
    """Set ``fields`` among the current context's log ids; an empty value removes that id.

    For a task that owns its context (a run's driver): nothing needs resetting when it ends.
    """
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise ValueError(f"unknown log fields: {sorted(unknown)}")
    merged = {k: v for k, v in {**_FIELDS.get(), **fields}.items() if v}
    return _FIELDS.set(MappingProxyType(merged))


@contextlib.contextmanager
def log_fields(**fields: str) -> Iterator[None]:
    """Log with ``fields`` added while the block runs (one tool call, one RPC)."""
    token = bind_log_fields(**fields)
    try:
        yield
    finally:
        _FIELDS.reset(token)


# -- redaction --------------------------------------------------------------------------------------

# Names whose values are secrets, as an extra's key or a "name=value" in text. Matched as whole
# words, so "idempotency_key" or "input_tokens" stay readable.
_SECRET_NAMES = (
    r"pass(?:word|wd|phrase)?|secret|client[_-]?secret|token|access[_-]?token|refresh[_-]?token|"
    r"id[_-]?token|api[_-]?key|apikey|x-api-key|private[_-]?key|access[_-]?key|secret[_-]?key|"
    r"signing[_-]?key|encryption[_-]?key|authorization|"
    r"proxy-authorization|credentials?|cookie|set-cookie|grant|x-agentrt-grant|bearer"
)
_KEY_NAME = re.compile(rf"(?:{_SECRET_NAMES})", re.IGNORECASE)
# Credential shapes, wherever they stand. A JWT (and so a call grant) starts with a base64url
# JSON header, '{"' -> 'eyJ'; its three parts are joined by dots.
_SHAPE = re.compile(
    "|".join(
        (
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*)?",
            r"(?<![A-Za-z0-9])(?i:bearer)\s+[^\s\"',;]+",
            r"(?<![A-Za-z0-9])(?:sk|pk|rk)[-_](?:live_|test_|proj-|ant-)?[A-Za-z0-9_-]{8,}",
            r"(?<![A-Za-z0-9])(?:ghp|gho|ghs|ghu|github_pat|glpat|xox[abprs])[-_][A-Za-z0-9_-]{8,}",
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])",
            r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}",  # a Google API key
            r"(?<=://)[^/@\s]+@",  # user:password@ in a URL
            r"(?<=[?&][kK][eE][yY]=)[^&\s\"'#]+",  # ?key=... in a URL (the pairs below skip bare "key")
        )
    )
)  # one pass over the text for all of them: a line is redacted on every write
_MAX_SECRETS = 256  # registered secrets: a handful of API keys, never one per request
_MIN_SECRET = 6  # shorter values would redact ordinary words


class Redactor:
    """Takes secrets out of text and of structured values; thread-safe to extend."""

    def __init__(self, *, fields: Iterable[str] = (), secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()
        self._fields: frozenset[str] = frozenset()
        self._pair = re.compile("")
        self.set_fields(fields)
        for secret in secrets:
            self.add_secret(secret)

    def set_fields(self, fields: Iterable[str]) -> None:
        """Also treat these field names (case-insensitive) as sensitive: ``[logging] redact_fields``."""
        names = frozenset(f.strip().lower() for f in fields if f.strip())
        extra = "".join(f"|{re.escape(name)}" for name in sorted(names, key=len, reverse=True))
        # name = value, name: value, "name": "value", name=value&... ; a quoted value ends at its
        # closing quote (it may hold spaces), a bare one at whitespace, a quote, , ; & ) } or ].
        pair = re.compile(
            rf"(?<![\w-])((?:[\w-]*?[_-])?(?:{_SECRET_NAMES}{extra})[\"']?\s*[:=]\s*)"
            r"(\"(?:[^\"\\]|\\.)*\"?|'(?:[^'\\]|\\.)*'?|[^\s\"',;&)}\]]+)",
            re.IGNORECASE,
        )
        with self._lock:
            self._fields = names
            self._pair = pair

    def add_secret(self, secret: str) -> None:
        """Never let ``secret`` appear in a log line again (values shorter than 6 are ignored)."""
        secret = secret.strip()
        if len(secret) < _MIN_SECRET:
            return
        with self._lock:
            if secret in self._secrets or len(self._secrets) >= _MAX_SECRETS:
                return
            # Longest first: a secret that contains another is taken out whole.
            self._secrets = tuple(sorted((*self._secrets, secret), key=len, reverse=True))

    def sensitive(self, name: str) -> bool:
        """Whether a field called ``name`` holds a secret."""
        lowered = name.lower()
        if lowered in self._fields:
            return True
        # The name, or what follows a qualifier in it: "db_password", "x_api_key", "auth-token".
        tails = [lowered] + [lowered[i + 1 :] for i, c in enumerate(lowered) if c in "_-"]
        return any(_KEY_NAME.fullmatch(tail) is not None for tail in tails)

    def text(self, text: str) -> str:
        """``text`` with every registered secret, credential shape and sensitive value replaced."""
        if len(text) < _MIN_SECRET:
            return text  # shorter than any secret, shape or name=value worth the name
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
                if secret in text:  # the marker and what follows it spelled the secret again
                    return f"{REDACTED} (the line held a secret)"
        text = _SHAPE.sub(REDACTED, text)
        if "=" not in text and ":" not in text:
            return text  # no name=value in it
        return self._pair.sub(_redact_pair, text)

    def value(self, value: Any, name: str = "") -> Any:
        """A JSON-ready copy of ``value``: strings redacted, sensitively named strings replaced whole."""
        if isinstance(value, bool | int | float) or value is None:
            return value  # counts and flags: never a credential, whatever the field's name
        if name and self.sensitive(name):
            return REDACTED
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self.value(v) for v in value]
        return self.text(str(value))


def _redact_pair(match: re.Match[str]) -> str:
    value = match.group(2)
    quote = value[0] if value[0] in "\"'" else ""
    return f"{match.group(1)}{quote}{REDACTED}{quote}"


_REDACTOR = Redactor()


def redactor() -> Redactor:
    """The process's redactor: the one both formatters use."""
    return _REDACTOR


def register_secret(secret: str) -> None:
    """Keep ``secret`` (an API key, a password read from a file) out of every log line."""
    _REDACTOR.add_secret(secret)


# -- formatting -------------------------------------------------------------------------------------

# Attributes every LogRecord has: what is left of a record's __dict__ are the caller's extras.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def _trace_ids() -> tuple[str, str] | None:
    if _trace is None:
        return None
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def _timestamp(created: float) -> str:
    moment = dt.datetime.fromtimestamp(created, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_FIXED = frozenset({"ts", "level", "logger", "message", "trace_id", "span_id", "exc", "stack"})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, ids, extras, ``exc``."""

    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        try:
            return self._format(record)
        except Exception as exc:  # a line still, never logging's raw traceback on stderr
            return json.dumps(
                {
                    "ts": _timestamp(record.created),
                    "level": record.levelname,
                    "logger": record.name,
                    "message": f"unformattable log record ({type(exc).__name__})",
                }
            )

    def _format(self, record: logging.LogRecord) -> str:
        redact = self._redact or _REDACTOR
        line: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": redact.text(_message(record)),
        }
        line.update({k: redact.text(v) for k, v in current_log_fields().items()})
        ids = _trace_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in _FIXED and not key.startswith("_"):
                line[key] = redact.value(value, key)
        if record.exc_info:
            line["exc"] = redact.text(self.formatException(record.exc_info))
        if record.stack_info:
            line["stack"] = redact.text(self.formatStack(record.stack_info))
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: MESSAGE [run=... call=...]``, redacted as a whole."""

    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = " ".join(f"{k}={v}" for k, v in current_log_fields().items())
        if ids:
            first, newline, rest = text.partition("\n")
            text = f"{first} [{ids}]{newline}{rest}"
        return (self._redact or _REDACTOR).text(text)


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # bad %-arguments, or an argument whose str() raises: keep the template
        return str(record.msg)


# -- levels and setup -------------------------------------------------------------------------------


def parse_level_spec(spec: str) -> tuple[str | None, dict[str, str]]:
    """``"INFO"``, ``"agentrt.engine=INFO,grpc=WARNING"`` or both: (root level or None, per logger).

    Raises:
        ValueError: an unknown level name or an empty logger name.
    """
    root: str | None = None
    levels: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, level = part.rpartition("=")
        if sep and not name.strip():
            raise ValueError(f"{part!r}: no logger name before '='")
        level = check_level(level)
        if sep:
            levels[name.strip()] = level
        else:
            root = level
    return root, levels


def check_level(level: str) -> str:
    """The level's canonical name.

    Raises:
        ValueError: not one of DEBUG, INFO, WARNING, ERROR, CRITICAL.
    """
    upper = level.strip().upper()
    if upper not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError(f"unknown log level {level!r} (DEBUG, INFO, WARNING, ERROR or CRITICAL)")
    return upper


def resolve_format(
    flag: str | None, default: str = "text", environ: Mapping[str, str] | None = None
) -> LogFormat:
    """``--log-format``, else ``AGENTRT_LOG_FORMAT``, else ``default`` (the runtime's ``[logging]``).

    Raises:
        ValueError: the variable names another format.
    """
    env = os.environ if environ is None else environ
    chosen = flag or env.get(FORMAT_ENV, "").strip().lower() or default
    if chosen not in ("json", "text"):
        raise ValueError(f"{FORMAT_ENV}={chosen!r}: expected json or text")
    return "json" if chosen == "json" else "text"


_HANDLER_MARK = "_agentrt_log_handler"


def configure_logging(
    *,
    log_format: LogFormat = "text",
    level: str = "WARNING",
    levels: Mapping[str, str] | None = None,
    redact_fields: Iterable[str] = (),
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send every log record to ``stream`` (stderr) as ``log_format`` lines, redacted.

    Replaces the handler an earlier call installed on the root logger (a second call
    reconfigures). ``level`` is the root's; ``levels`` maps logger names to their own.

    Raises:
        ValueError: an unknown format or level.
    """
    if log_format not in ("json", "text"):
        raise ValueError(f"unknown log format {log_format!r} (json or text)")
    _REDACTOR.set_fields(redact_fields)
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):  # ours from an earlier call; others' (pytest's) stay
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(check_level(level))
    logging.captureWarnings(True)  # a warning is a line like the others, not raw text on stderr
    for name, named in (levels or {}).items():
        logging.getLogger(name).setLevel(check_level(named))
    sys.excepthook = _uncaught  # so is a crash's traceback (redacted like any line)
    threading.excepthook = _uncaught_in_thread
    return handler


def _uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger("agentrt").critical("uncaught %s", kind.__name__, exc_info=(kind, exc, tb))


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    info = (args.exc_type, args.exc_value, args.exc_traceback)
    logging.getLogger("agentrt").critical(
        "uncaught %s in thread %s", args.exc_type.__name__, name, exc_info=info
    )
