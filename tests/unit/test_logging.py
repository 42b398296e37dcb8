"""Structured logs: the JSON and text formatters, redaction, context ids, levels and their config.

The redaction properties are checked with hypothesis: a secret the process registered, or one
shaped like a credential (a JWT or call grant, a bearer token, an API key), embedded anywhere in a
message, an exception or an extra, never survives into a line.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import string
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.server._main import main as serve_main
from agentrt.server.config import ConfigError, LoggingConfig, load_settings
from agentrt.server.telemetry import log_failure, resolve_format, setup_logging
from agentrt.toolhost import main as toolhost_main
from agentrt.toolhost.logs import (
    REDACTED,
    JsonFormatter,
    Redactor,
    TextFormatter,
    bind_log_fields,
    configure_logging,
    current_log_fields,
    log_fields,
    parse_level_spec,
)
from agentrt.toolhost.security import GrantSigner


def record(message: str, *args: object, exc: BaseException | None = None, **extra: Any) -> logging.LogRecord:
    logger = logging.getLogger("agentrt.test")
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logger.makeRecord("agentrt.test", logging.INFO, __file__, 1, message, args, exc_info, extra=extra)


def json_line(rec: logging.LogRecord, redactor: Redactor | None = None) -> dict[str, Any]:
    text = JsonFormatter(redactor or Redactor()).format(rec)
    assert "\n" not in text  # one record, one line
    parsed: dict[str, Any] = json.loads(text)
    return parsed


@pytest.fixture(autouse=True)
def _restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    hooks = sys.excepthook, threading.excepthook
    levels = {name: logging.getLogger(name).level for name in ("agentrt.engine", "grpc", "agentrt.run")}
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)
    sys.excepthook, threading.excepthook = hooks


# -- the JSON line ----------------------------------------------------------------------------------


def test_a_json_line_has_the_fixed_fields_then_the_context_ids_then_extras() -> None:
    with log_fields(run_id="r1", tenant="acme", call_id="c1"):
        line = json_line(record("run %s moved", "r1", step=3, layer="call"))
    assert list(line)[:4] == ["ts", "level", "logger", "message"]
    assert line["ts"].endswith("Z") and "T" in line["ts"]
    assert (line["level"], line["logger"], line["message"]) == ("INFO", "agentrt.test", "run r1 moved")
    assert (line["run_id"], line["tenant"], line["call_id"]) == ("r1", "acme", "c1")
    assert (line["step"], line["layer"]) == (3, "call")
    assert "trace_id" not in line  # no current span


def test_trace_and_span_ids_come_from_the_current_span() -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    context = SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=False, trace_flags=TraceFlags(1))
    with trace.use_span(NonRecordingSpan(context)):
        line = json_line(record("inside"))
    assert line["trace_id"] == f"{0xABC:032x}" and line["span_id"] == f"{0xDEF:016x}"


def test_an_extra_cannot_overwrite_the_fixed_fields_but_may_name_the_run() -> None:
    line = json_line(record("m", level_="x", run_id="r9", **{"ts_": 1}))
    assert line["level"] == "INFO" and line["run_id"] == "r9"


def test_the_exception_is_in_the_line_and_redacted() -> None:
    key = "sk-" + "x" * 30
    try:
        raise RuntimeError(f"provider said no to {key}")
    except RuntimeError as exc:
        line = json_line(record("call failed", exc=exc))
    assert "RuntimeError" in line["exc"] and key not in json.dumps(line)


def test_bad_percent_arguments_keep_the_template_rather_than_lose_the_line() -> None:
    line = json_line(record("two %s %s", "only-one"))
    assert line["message"] == "two %s %s"


def test_a_record_that_cannot_be_formatted_is_still_one_json_line() -> None:
    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("no")

        __repr__ = __str__

    assert json_line(record("value %s", Hostile()))["message"] == "value %s"
    line = json_line(record("m", thing=Hostile()))
    assert line["message"] == "unformattable log record (RuntimeError)" and line["level"] == "INFO"


def test_the_text_line_keeps_its_shape_with_the_ids_after_the_message() -> None:
    with log_fields(run_id="r1", call_id="c1"):
        text = TextFormatter(Redactor()).format(record("hello Bearer abcdefghijkl"))
    assert text.endswith(f"INFO agentrt.test: hello {REDACTED} [run_id=r1 call_id=c1]")


# -- context ids ------------------------------------------------------------------------------------


async def test_context_ids_follow_tasks_and_end_with_their_block() -> None:
    async def in_a_task() -> dict[str, str]:
        return dict(current_log_fields())

    with log_fields(run_id="r1"):
        with log_fields(call_id="c1"):
            assert dict(current_log_fields()) == {"run_id": "r1", "call_id": "c1"}
            assert await asyncio.create_task(in_a_task()) == {"run_id": "r1", "call_id": "c1"}
        assert dict(current_log_fields()) == {"run_id": "r1"}
    assert dict(current_log_fields()) == {}


def test_an_empty_value_takes_an_id_out() -> None:
    with log_fields(run_id="parent", call_id="c1"), log_fields(run_id="child", call_id=""):
        assert dict(current_log_fields()) == {"run_id": "child"}


async def test_a_task_that_binds_ids_does_not_leak_them_to_its_parent() -> None:
    async def driver() -> None:
        bind_log_fields(run_id="r2", tenant="t")

    await asyncio.create_task(driver())
    assert dict(current_log_fields()) == {}


def test_unknown_context_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown log fields"):
        bind_log_fields(secret="x")


# -- redaction --------------------------------------------------------------------------------------


def test_credential_shapes_are_taken_out_wherever_they_stand() -> None:
    grant = GrantSigner(key=Ed25519PrivateKey.generate()).sign(
        tenant="t",
        run_id="r",
        call_id="c",
        idempotency_key="k",
        fencing_token=1,
        tool="x.y",
        arguments_json="{}",
    )
    texts = [
        f"metadata x-agentrt-grant={grant}",
        f"grant:{grant}",
        "authorization: Bearer tok-abc123def456",
        "key sk-proj-abcdefghijklmnop in the error",
        "ghp_abcdefghijklmnopqrstuvwxyz01",
        "AKIAABCDEFGHIJKLMNOP",
        "postgresql://app:hunter2hunter2@db/app",
        "-----BEGIN PRIVATE KEY-----\nMIIEv...\n-----END PRIVATE KEY-----",
        'config {"api_key": "plain-value-123", "password": "p@ss w0rd"}',
        "db_password=swordfish99 next",
        "POST https://example.test/v1/models?alt=json&key=AIzaSyA-abcdefghijklmnopqrstuvwxyz0123 ok",
    ]
    redactor = Redactor()
    for text in texts:
        out = redactor.text(text)
        for secret in (
            grant,
            "tok-abc123def456",
            "sk-proj-abcdefghijklmnop",
            "hunter2hunter2",
            "MIIEv",
            "AIza",
        ):
            assert secret not in out, (text, out)
        assert REDACTED in out, (text, out)
    assert redactor.text(texts[8]) == f'config {{"api_key": "{REDACTED}", "password": "{REDACTED}"}}'
    assert "swordfish99" not in redactor.text(texts[9])


def test_ordinary_ids_and_counts_stay_readable() -> None:
    redactor = Redactor()
    text = (
        "run 01a23550d5585c2e4478c31b440084a0 call call_lookup idempotency_key=run:1:c1 "
        "input_tokens=10 output_tokens=5 trace 4bf92f3577b34da6a3ce929d0e0e4736 disk-cleanup-job"
    )
    assert redactor.text(text) == text
    line = json_line(record("usage", input_tokens=10, token_count=3, idempotency_key="k1"), redactor)
    assert (line["input_tokens"], line["token_count"], line["idempotency_key"]) == (10, 3, "k1")


def test_sensitive_extras_are_replaced_whole_even_when_nested() -> None:
    redactor = Redactor(fields=["customer_ssn"])
    line = json_line(
        record(
            "m",
            api_key="anything at all",
            headers={"Authorization": "Basic dXNlcjpwYXNz", "accept": "json"},
            customer_ssn="078-05-1120",
            items=[{"password": "pw-1234567"}],
            note="customer_ssn: 078-05-1120",
        ),
        redactor,
    )
    assert line["api_key"] == REDACTED and line["headers"] == {"Authorization": REDACTED, "accept": "json"}
    assert line["customer_ssn"] == REDACTED and line["items"] == [{"password": REDACTED}]
    assert "078-05-1120" not in json.dumps(line)


def test_registered_secrets_are_bounded_and_short_ones_ignored() -> None:
    redactor = Redactor()
    redactor.add_secret("abc")  # too short: would redact ordinary words
    for i in range(300):
        redactor.add_secret(f"secret-number-{i:04d}")
    assert redactor.text("abc") == "abc"
    assert redactor.text("secret-number-0000") == REDACTED
    assert redactor.text("secret-number-0299") == "secret-number-0299"  # past the cap of 256


NOISE = f"{REDACTED} (the line held a secret) ValueError: message detail nested other field_ exc"


def strings(value: object) -> Iterator[str]:
    """Every string in a parsed line: keys and values, however deep."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


SECRET_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs",))
AROUND = st.text(SECRET_CHARS, max_size=40)
REGISTERED = st.text(SECRET_CHARS, min_size=6, max_size=40).filter(lambda s: s.strip() == s)
B64URL = string.ascii_letters + string.digits + "-_"
SHAPED = st.one_of(
    st.builds(
        lambda a, b, c: f"eyJ{a}.{b}.{c}", *(st.text(B64URL, min_size=4, max_size=30) for _ in range(3))
    ),
    st.builds(lambda t: f"Bearer {t}", st.text(B64URL + ".~+/", min_size=8, max_size=40)),
    st.builds(lambda t: f"sk-{t}", st.text(B64URL, min_size=8, max_size=40)),
    st.builds(lambda t: f"ghp_{t}", st.text(B64URL, min_size=16, max_size=40)),
)
SEPARATOR = st.sampled_from([" ", "\n", "\t", ",", ";", "(", "'", '"', "=", ":", "[", "{", "<", ""])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    secret=REGISTERED, before=AROUND, after=AROUND, where=st.sampled_from(["message", "extra", "exc", "key"])
)
def test_a_registered_secret_never_survives_wherever_it_is_embedded(
    secret: str, before: str, after: str, where: str
) -> None:
    redactor = Redactor(secrets=[secret])
    text = before + secret + after
    rec = {
        "message": lambda: record("%s", text),
        "extra": lambda: record("m", detail={"nested": [text]}, other=text),
        "exc": lambda: record("m", exc=ValueError(text)),
        "key": lambda: record("m", **{"field_" + str(len(text)): text}),
    }[where]()
    line = json.loads(JsonFormatter(redactor).format(rec))
    # What the formatter itself writes (field names, the logger, the marker) may spell it.
    content = {k: v for k, v in line.items() if k not in ("ts", "level", "logger")}
    for leaf in strings(content):
        assert secret not in leaf or secret in NOISE, leaf
    text_line = TextFormatter(redactor).format(rec).split(": ", 1)[1]  # after TIME LEVEL LOGGER
    assert secret not in text_line or secret in NOISE


@settings(max_examples=300)
@given(secret=SHAPED, before=AROUND, after=AROUND, left=SEPARATOR, right=SEPARATOR)
def test_a_credential_shaped_secret_never_survives_in_a_message_or_extra(
    secret: str, before: str, after: str, left: str, right: str
) -> None:
    # A credential that is a word of its own: text glued to its front makes it another word.
    if left == "" and before and (before[-1].isalnum()):
        left = " "
    text = f"{before}{left}{secret}{right}{after}"
    redactor = Redactor()
    token = secret.removeprefix("Bearer ")
    # What the surrounding text spells by itself may stay; the embedded secret may not.
    allowed = (before + left).count(token) + (right + after).count(token)
    for rec in (record("%s", text), record("m", info=text, nested={"a": [text]})):
        line = json.loads(JsonFormatter(redactor).format(rec))
        for value in (line["message"], line.get("info", ""), line.get("nested", {"a": [""]})["a"][0]):
            assert value.count(token) <= allowed, (text, value)


# -- levels and setup -------------------------------------------------------------------------------


def test_level_specs_take_a_root_level_pairs_or_both() -> None:
    assert parse_level_spec("info") == ("INFO", {})
    assert parse_level_spec("agentrt.engine=INFO,grpc=warning") == (
        None,
        {"agentrt.engine": "INFO", "grpc": "WARNING"},
    )
    assert parse_level_spec("WARNING, agentrt.run=INFO") == ("WARNING", {"agentrt.run": "INFO"})
    assert parse_level_spec("") == (None, {})
    for bad in ("LOUD", "grpc=LOUD", "=INFO"):
        with pytest.raises(ValueError):
            parse_level_spec(bad)


def test_configure_logging_sets_levels_per_logger_and_replaces_only_its_own_handler() -> None:
    stream = io.StringIO()
    mine = logging.NullHandler()
    logging.getLogger().addHandler(mine)
    configure_logging(log_format="text", level="ERROR", stream=io.StringIO())
    configure_logging(log_format="json", level="WARNING", levels={"agentrt.engine": "DEBUG"}, stream=stream)
    assert mine in logging.getLogger().handlers  # pytest's (here: a stand-in) stay
    logging.getLogger("agentrt.engine").debug("shown")
    logging.getLogger("agentrt.other").info("hidden")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["shown"]
    logging.getLogger().removeHandler(mine)


def test_an_uncaught_exception_is_a_redacted_line_too() -> None:
    stream = io.StringIO()
    configure_logging(log_format="json", stream=stream)
    try:
        raise RuntimeError("crashed holding Bearer abcdefghijklmnop")
    except RuntimeError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    thread = threading.Thread(target=lambda: 1 / 0, name="worker")
    thread.start()
    thread.join()
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["level"] == "CRITICAL" and first["message"] == "uncaught RuntimeError"
    assert "abcdefghijklmnop" not in first["exc"] and "RuntimeError" in first["exc"]
    assert second["message"] == "uncaught ZeroDivisionError in thread worker"


def test_configure_logging_refuses_an_unknown_format_or_level() -> None:
    with pytest.raises(ValueError, match="log format"):
        configure_logging(log_format="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="log level"):
        configure_logging(level="LOUD")


def test_the_format_is_the_flag_then_the_env_then_the_config() -> None:
    assert resolve_format(None, "json", {}) == "json"
    assert resolve_format(None, "text", {"AGENTRT_LOG_FORMAT": "json"}) == "json"
    assert resolve_format("text", "json", {"AGENTRT_LOG_FORMAT": "json"}) == "text"
    with pytest.raises(ValueError, match="AGENTRT_LOG_FORMAT"):
        resolve_format(None, "json", {"AGENTRT_LOG_FORMAT": "yaml"})


def test_setup_logging_puts_the_flag_pairs_on_top_of_the_configured_levels() -> None:
    config = LoggingConfig(level="ERROR", levels={"agentrt.engine": "INFO", "grpc": "DEBUG"})
    setup_logging(config, log_level="agentrt.engine=WARNING", environ={})
    assert logging.getLogger().level == logging.ERROR
    assert logging.getLogger("agentrt.engine").level == logging.WARNING
    assert logging.getLogger("grpc").level == logging.DEBUG


def test_the_logging_section_is_validated(tmp_path: Path) -> None:
    path = tmp_path / "agentrt.toml"
    path.write_text(
        '[logging]\nformat = "json"\nlevels = { "agentrt.run" = "info" }\nredact_fields = ["ssn"]\n'
    )
    settings = load_settings(path, env={})
    assert settings.logging == LoggingConfig(
        format="json", levels={"agentrt.run": "INFO"}, redact_fields=["ssn"]
    )
    for bad, where in (
        ('format = "xml"', "logging.format"),
        ('level = "LOUD"', "logging.level"),
        ('levels = { "grpc" = "LOUD" }', "logging.levels"),
        ('levels = { "" = "INFO" }', "logging.levels"),
        ("shout = true", "logging.shout"),
    ):
        path.write_text(f"[logging]\n{bad}\n")
        with pytest.raises(ConfigError, match=where):
            load_settings(path, env={})
    # AGENTRT_LOG_FORMAT is the log setup's, not a settings key; AGENTRT_LOGGING__FORMAT is.
    assert load_settings(None, env={"AGENTRT_LOG_FORMAT": "json"}).logging.format == "text"
    assert load_settings(None, env={"AGENTRT_LOGGING__FORMAT": "json"}).logging.format == "json"


def test_serve_refuses_bad_log_options_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve_main(["--log-level", "LOUD"]) == 2
    assert "unknown log level 'LOUD'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        serve_main(["--log-format", "xml"])
    assert info.value.code == 2
    path = tmp_path / "agentrt.toml"
    path.write_text('[logging]\nlevels = { "grpc" = "LOUD" }\n')
    assert serve_main(["--config", str(path)]) == 2
    assert "logging.levels" in capsys.readouterr().err


def test_the_tool_host_refuses_bad_log_options_with_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert toolhost_main(["--log-level", "grpc=LOUD"]) == 2
    assert "unknown log level 'LOUD'" in capsys.readouterr().err
    assert toolhost_main(["--log-format", "xml"]) == 2
    monkeypatch.setenv("AGENTRT_LOG_FORMAT", "yaml")
    assert toolhost_main([]) == 2
    assert "AGENTRT_LOG_FORMAT='yaml'" in capsys.readouterr().err


# -- background passes ------------------------------------------------------------------------------


def test_an_environmental_blip_is_one_warning_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("agentrt.engine")
    caplog.set_level(logging.INFO, logger="agentrt.engine")
    try:
        raise ConnectionResetError("connection to postgresql://app:pw@db lost")
    except ConnectionResetError as exc:
        log_failure(logger, exc, "claiming runs failed")
    (blip,) = caplog.records
    assert blip.levelno == logging.WARNING and blip.exc_info is None
    assert blip.getMessage() == "claiming runs failed: ConnectionResetError (unavailable)"


def test_a_bug_in_a_background_pass_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("agentrt.engine")
    caplog.set_level(logging.INFO, logger="agentrt.engine")
    try:
        raise KeyError("oops")
    except KeyError as exc:
        log_failure(logger, exc, "retention pass failed; trying again in %.0f s", 60.0)
    (bug,) = caplog.records
    assert bug.levelno == logging.ERROR and bug.exc_info is not None
    assert bug.getMessage() == "retention pass failed; trying again in 60 s"


def test_the_readmes_logging_block_is_a_valid_config(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    found = re.search(r"```toml\n(\[logging\]\n.*?)```", readme, re.DOTALL)
    assert found is not None, "the README's [logging] block"
    path = tmp_path / "agentrt.toml"
    path.write_text(found.group(1))
    assert load_settings(path, env={}).logging.redact_fields == ["customer_ssn"]


def test_secrets_the_processes_read_are_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrt.server.models._http import read_api_key
    from agentrt.toolhost.logs import redactor
    from agentrt.toolhost.security import PayloadCipher, write_key_file

    key_file = tmp_path / "payload.keys"
    write_key_file(key_file)
    material = next(iter(json.loads(key_file.read_text())["keys"].values()))
    PayloadCipher.from_file(key_file)
    monkeypatch.setenv("LOGS_TEST_KEY", "plain-api-key-without-a-known-shape")
    read_api_key(None, "LOGS_TEST_KEY")
    (tmp_path / "key.txt").write_text("another-plain-key-from-a-file\n")
    read_api_key(None, "UNUSED", str(tmp_path / "key.txt"))
    for secret in (material, "plain-api-key-without-a-known-shape", "another-plain-key-from-a-file"):
        assert redactor().text(f"oops: {secret}!") == f"oops: {REDACTED}!"


FIELD_NAMES = st.sampled_from(["customer_ssn", "Password", "api_key", "x-api-key", "Authorization", "grant"])
VALUES = st.text(string.ascii_letters + string.digits + "!@#$%^*_+-./~", min_size=6, max_size=30)
PAIR_FORMS = st.sampled_from(
    ["{n}={v}", "{n}: {v}", '"{n}": "{v}"', "'{n}'='{v}'", "{n} = {v}", "?{n}={v}&x=1"]
)


@settings(max_examples=300)
@given(name=FIELD_NAMES, value=VALUES, form=PAIR_FORMS, before=AROUND, after=AROUND)
def test_a_sensitive_fields_value_never_survives_as_a_pair_or_an_extra(
    name: str, value: str, form: str, before: str, after: str
) -> None:
    redactor = Redactor(fields=["customer_ssn"])
    text = f"{before} {form.format(n=name, v=value)} {after}"
    allowed = before.count(value) + after.count(value)
    line = json.loads(JsonFormatter(redactor).format(record("%s", text, **{name.replace("-", "_"): value})))
    assert line["message"].count(value) <= allowed, (text, line["message"])
    assert line[name.replace("-", "_")] == REDACTED
