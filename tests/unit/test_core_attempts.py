"""The core's verdicts on attempts (core/_attempts.py): every outcome kind at every timeout layer.

The verdict is a function of typed facts, the attempt, the policy and the deadlines; never of an
error's text (§11.10).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.server.core import LedgerSilence, TimeoutLayer, ToolErrorCode, ToolOutcome, attempts

RETRY = attempts.RetryPolicy(max_attempts=3, base_s=1.0, cap_s=8.0)
NOW = 1000.0

OK = ToolOutcome('{"ok": true}', None)
TRANSIENT = ToolOutcome.failure("TRANSIENT", "busy")
TIMED_OUT = ToolOutcome.failure("TRANSIENT", "deadline", timed_out=True)
NO_SLOT = ToolOutcome.failure("TRANSIENT", "no free slot", timed_out=True, never_sent=True)
NOT_CONNECTED = ToolOutcome.failure("TRANSIENT", "no connection", connect_failed=True)
LOST = ToolOutcome.failure("TRANSIENT", "connection reset", transport_lost=True)
STOPPED = ToolOutcome.failure("CANCELLED", "stopped", host_unsure=True)
RUNNING = ToolOutcome.failure("TRANSIENT", "still running", still_running=True)
CANCELLED = ToolOutcome.failure("CANCELLED", "the tool stopped first")

OUTCOMES = {
    "success": OK,
    "transient": TRANSIENT,
    "timed_out": TIMED_OUT,
    "no_slot": NO_SLOT,
    "not_connected": NOT_CONNECTED,
    "transport_lost": LOST,
    "host_unsure": STOPPED,
    "still_running": RUNNING,
    "cancelled": CANCELLED,
    **{
        code.value.lower(): ToolOutcome.failure(code, "no")
        for code in ToolErrorCode
        if code not in (ToolErrorCode.TRANSIENT, ToolErrorCode.CANCELLED)
    },
}


def clock(
    layer: TimeoutLayer,
    *,
    began_s: float = NOW - 1.0,
    step_left: float = 100.0,
    run_left: float = 100.0,
    expected_s: float = 0.0,
) -> attempts.AttemptClock:
    return attempts.AttemptClock(
        began_s=began_s,
        now_s=NOW,
        step_deadline_s=NOW + step_left,
        run_deadline_s=NOW + run_left,
        layer=layer,
        expected_s=expected_s,
    )


def verdict(
    outcome: ToolOutcome,
    *,
    layer: TimeoutLayer = TimeoutLayer.CALL,
    write: bool = False,
    attempt: int = 1,
    cancelled: bool = False,
    reconciled: bool = False,
    rand: float = 0.5,
    **clock_args: float,
) -> attempts.ToolVerdict:
    return attempts.tool_verdict(
        outcome,
        tool="refund",
        attempt=attempt,
        write=write,
        cancelled=cancelled,
        clock=clock(layer, **clock_args),
        retry=RETRY,
        rand=rand,
        reconciled=reconciled,
    )


# What each outcome means for a read, with time and attempts to spare, at each layer.
READ_TABLE = {
    "success": (attempts.Done(), attempts.Done(), attempts.Done()),
    "transient": (attempts.Retry(0.5), attempts.Retry(0.5), attempts.Retry(0.5)),
    "timed_out": (attempts.Retry(0.5), attempts.StepTimeout(), attempts.Retry(0.5)),
    "no_slot": (attempts.Retry(0.5), attempts.StepTimeout(), attempts.Retry(0.5)),
    "not_connected": (attempts.Retry(0.5), attempts.Retry(0.5), attempts.Retry(0.5)),
    "transport_lost": (attempts.Retry(0.5), attempts.Retry(0.5), attempts.Retry(0.5)),
    "host_unsure": (attempts.Done(), attempts.Done(), attempts.Done()),
    "still_running": (attempts.Retry(0.5), attempts.Retry(0.5), attempts.Retry(0.5)),
    "cancelled": (attempts.Done(), attempts.Done(), attempts.Done()),
    "unauthorized": (attempts.Fail("tool_unauthorized:refund"),) * 3,
    "key_conflict": (attempts.Fail("idempotency_conflict"),) * 3,
    "fenced": (attempts.Fenced(),) * 3,
}
LAYERS = (TimeoutLayer.CALL, TimeoutLayer.STEP, TimeoutLayer.RUN)


@pytest.mark.parametrize("kind", sorted(OUTCOMES))
@pytest.mark.parametrize("layer", LAYERS)
def test_every_outcome_kind_of_a_read_at_every_layer(kind: str, layer: TimeoutLayer) -> None:
    expected = READ_TABLE.get(kind, (attempts.Done(),) * 3)[LAYERS.index(layer)]
    assert verdict(OUTCOMES[kind], layer=layer) == expected


IN_DOUBT = {"timed_out", "transport_lost", "host_unsure", "still_running"}


@pytest.mark.parametrize("kind", sorted(OUTCOMES))
@pytest.mark.parametrize("layer", LAYERS)
def test_a_write_that_may_have_run_asks_its_ledger_first_and_is_otherwise_a_read(
    kind: str, layer: TimeoutLayer
) -> None:
    got = verdict(OUTCOMES[kind], layer=layer, write=True)
    if kind in IN_DOUBT:
        assert got == attempts.AskLedger()
    else:
        # Provably unsent (no slot, no connection) or the host's own answer: as for a read.
        assert got == verdict(OUTCOMES[kind], layer=layer)


@pytest.mark.parametrize("kind", sorted(IN_DOUBT))
@pytest.mark.parametrize("layer", LAYERS)
def test_once_its_ledger_never_saw_it_a_write_is_retried_like_a_read(kind: str, layer: TimeoutLayer) -> None:
    got = verdict(OUTCOMES[kind], layer=layer, write=True, reconciled=True)
    assert got == verdict(OUTCOMES[kind], layer=layer)


def test_an_errors_text_never_decides() -> None:
    # A tool's own TRANSIENT whose message says "timeout": retried, not a step timeout.
    says_timeout = ToolOutcome.failure("TRANSIENT", "upstream timeout: deadline exceeded")
    assert verdict(says_timeout, layer=TimeoutLayer.STEP) == attempts.Retry(0.5)
    assert verdict(says_timeout, layer=TimeoutLayer.STEP, write=True) == attempts.Retry(0.5)
    # A real timeout with a message that does not say so: a step timeout.
    silent = ToolOutcome.failure("TRANSIENT", "", timed_out=True)
    assert verdict(silent, layer=TimeoutLayer.STEP) == attempts.StepTimeout()


@given(message=st.text(max_size=60), kind=st.sampled_from(sorted(OUTCOMES)))
def test_the_same_facts_with_any_message_give_the_same_verdict(message: str, kind: str) -> None:
    outcome = OUTCOMES[kind]
    if outcome.error is None:
        return
    worded = ToolOutcome(
        None,
        type(outcome.error)(outcome.error.code, message),
        timed_out=outcome.timed_out,
        never_sent=outcome.never_sent,
        connect_failed=outcome.connect_failed,
        transport_lost=outcome.transport_lost,
        host_unsure=outcome.host_unsure,
        still_running=outcome.still_running,
    )
    for layer in LAYERS:
        for write in (False, True):
            assert verdict(worded, layer=layer, write=write) == verdict(outcome, layer=layer, write=write)


def test_a_cancelled_run_retries_nothing_and_a_fence_wins_over_everything() -> None:
    for kind, outcome in OUTCOMES.items():
        got = verdict(outcome, cancelled=True, write=True, reconciled=True)
        assert not isinstance(got, attempts.Retry), kind
    assert verdict(OUTCOMES["unauthorized"], cancelled=True) == attempts.Fail("tool_unauthorized:refund")
    assert verdict(OUTCOMES["fenced"], write=True) == attempts.Fenced()


def test_the_last_attempt_is_not_retried() -> None:
    assert verdict(TRANSIENT, attempt=3) == attempts.Done(exhausted=True)
    assert verdict(TRANSIENT, attempt=2) == attempts.Retry(1.0)  # half of the doubled backoff


def test_a_retry_must_fit_the_run_with_the_calls_expected_time() -> None:
    # The attempt took 10 s: a retry after 0.5 s needs 10.5 s of the run's 10 s left.
    assert verdict(TRANSIENT, began_s=NOW - 10, run_left=10.0) == attempts.Done(exhausted=True)
    assert verdict(TRANSIENT, began_s=NOW - 10, run_left=10.6) == attempts.Retry(0.5)


def test_a_call_refused_untaken_with_a_delay_is_retried_no_sooner_and_a_write_is_not_looked_up() -> None:
    drained = ToolOutcome.failure("TRANSIENT", "draining", never_sent=True, retry_after_s=3.0)
    assert not drained.in_doubt
    assert verdict(drained, write=True) == attempts.Retry(3.0)  # not AskLedger: the host took nothing
    assert verdict(drained, write=True, rand=0.0) == attempts.Retry(3.0)  # the delay, not the backoff
    longer = ToolOutcome.failure("TRANSIENT", "draining", never_sent=True, retry_after_s=0.1)
    assert verdict(longer, attempt=2) == attempts.Retry(1.0)  # the backoff when it is the longer
    # A delay that does not fit the run is no retry; the step's is a step timeout, as any retry.
    assert verdict(drained, began_s=NOW - 0.5, run_left=3.2) == attempts.Done(exhausted=True)
    assert verdict(drained, began_s=NOW - 0.5, step_left=3.2) == attempts.StepTimeout(exhausted=True)
    assert verdict(drained, attempt=3) == attempts.Done(exhausted=True)  # attempts still count


def test_a_retry_that_fits_the_run_but_not_the_step_is_a_step_timeout() -> None:
    got = verdict(TRANSIENT, began_s=NOW - 10, step_left=10.0, run_left=100.0)
    assert got == attempts.StepTimeout(exhausted=True)
    # Out of attempts, the step layer does not explain it: the failure is recorded as it is.
    assert verdict(TRANSIENT, attempt=3, step_left=0.1) == attempts.Done(exhausted=True)


def test_backoff_is_full_jitter_within_the_cap() -> None:
    assert verdict(TRANSIENT, rand=0.0) == attempts.Retry(0.0)
    assert verdict(TRANSIENT, attempt=2, rand=0.999) == attempts.Retry(pytest.approx(1.998))


def test_unauthorized_pauses_where_the_policy_says_so() -> None:
    got = attempts.recorded_verdict(
        OUTCOMES["unauthorized"],
        tool="refund",
        cancelled=False,
        on_unauthorized=attempts.UnauthorizedPolicy.PAUSE,
    )
    assert got == attempts.Pause("tool_unauthorized:refund")
    cancelled = attempts.recorded_verdict(
        OUTCOMES["unauthorized"],
        tool="refund",
        cancelled=True,
        on_unauthorized=attempts.UnauthorizedPolicy.PAUSE,
    )
    assert cancelled == attempts.Fail("tool_unauthorized:refund")


# -- before the attempt -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call_s", "step_left", "run_left", "expected"),
    [
        (5.0, 100.0, 100.0, attempts.Send(5.0, TimeoutLayer.CALL)),
        (5.0, 3.0, 100.0, attempts.Send(3.0, TimeoutLayer.STEP)),
        (5.0, 3.0, 2.2, attempts.Send(pytest.approx(2.0), TimeoutLayer.RUN)),
        (5.0, 5.0, 100.0, attempts.Send(5.0, TimeoutLayer.STEP)),  # a tie goes to the outer layer
        (5.0, 0.0, 100.0, attempts.StepTimeout()),
        (5.0, 100.0, 0.2, attempts.Expire()),
        (5.0, 0.0, 0.0, attempts.Expire()),
        (5.0, math.inf, 100.0, attempts.Send(5.0, TimeoutLayer.CALL)),
    ],
)
def test_plan_attempt_gives_the_smallest_time_left_and_its_layer(
    call_s: float, step_left: float, run_left: float, expected: object
) -> None:
    got = attempts.plan_attempt(
        now_s=NOW,
        call_timeout_s=call_s,
        step_deadline_s=NOW + step_left,
        run_deadline_s=NOW + run_left,
        reserve_s=0.2,
    )
    assert got == expected


# -- the ledger -------------------------------------------------------------------------------------


def test_what_the_ledger_says_of_a_write_in_doubt() -> None:
    assert attempts.ledger_after_doubt(OK) == attempts.Adopt()
    assert attempts.ledger_after_doubt(CANCELLED) == attempts.Adopt()
    assert attempts.ledger_after_doubt(STOPPED) == attempts.Unknown()
    assert attempts.ledger_after_doubt(LedgerSilence.UNKNOWN) == attempts.Unknown()
    assert attempts.ledger_after_doubt(LedgerSilence.NOT_FOUND) == attempts.Done()


def test_an_inherited_write_is_sent_again_only_when_its_ledger_proves_it_did_not_run() -> None:
    resend = attempts.ledger_before_resend
    assert resend(LedgerSilence.NOT_FOUND, cancelled=False) == attempts.Resend()
    assert resend(TRANSIENT, cancelled=False) == attempts.Resend()
    assert resend(CANCELLED, cancelled=False) == attempts.Resend()
    assert resend(OK, cancelled=False) == attempts.Adopt()
    assert resend(OUTCOMES["permanent"], cancelled=False) == attempts.Adopt()
    assert resend(STOPPED, cancelled=False) == attempts.Unknown()
    assert resend(LedgerSilence.UNKNOWN, cancelled=False) == attempts.Unknown()
    # A cancelled run sends nothing again: its earlier request may still be on its way.
    assert resend(LedgerSilence.NOT_FOUND, cancelled=True) == attempts.Unknown()
    assert resend(TRANSIENT, cancelled=True) == attempts.Adopt()


def wait(word: object, *, cancelled: bool, now_ms: int = 10_000, call_deadline_ms: int = 20_000) -> object:
    return attempts.ledger_in_wait(
        word,  # type: ignore[arg-type]
        cancelled=cancelled,
        now_ms=now_ms,
        call_deadline_ms=call_deadline_ms,
        cancel_requested_ms=8_000,
        cancel_wait_ms=5_000,
        ask_again_ms=now_ms + 1_000,
    )


def test_a_run_not_cancelled_waits_for_its_ledger_as_long_as_it_takes() -> None:
    assert wait(LedgerSilence.UNKNOWN, cancelled=False, now_ms=10**9) == attempts.Park(10**9 + 1_000)
    assert wait(STOPPED, cancelled=False) == attempts.Park(11_000)
    assert wait(LedgerSilence.NOT_FOUND, cancelled=False) == attempts.Resend()
    assert wait(OK, cancelled=False) == attempts.Adopt()
    assert wait(TRANSIENT, cancelled=False) == attempts.Resend()


def test_a_cancelled_run_waits_for_its_write_within_a_bound_then_hands_it_over() -> None:
    # Still running or unreachable: asked again, until the bound (cancel at 8 s + 5 s).
    assert wait(LedgerSilence.UNKNOWN, cancelled=True, now_ms=10_000) == attempts.Park(11_000)
    assert wait(LedgerSilence.UNKNOWN, cancelled=True, now_ms=12_500) == attempts.Park(13_001)
    assert wait(LedgerSilence.UNKNOWN, cancelled=True, now_ms=13_001) == attempts.HandOver()
    assert wait(RUNNING, cancelled=True, now_ms=13_001) == attempts.HandOver()
    # Stopped where it stood, and the host cannot tell: asking again tells no more.
    assert wait(STOPPED, cancelled=True, now_ms=9_000) == attempts.HandOver()
    # Never seen by its ledger: never ran once the attempt's deadline passed, else handed over.
    assert wait(LedgerSilence.NOT_FOUND, cancelled=True, now_ms=20_001) == attempts.NeverRan()
    assert wait(LedgerSilence.NOT_FOUND, cancelled=True, now_ms=13_001) == attempts.HandOver()
    assert wait(LedgerSilence.NOT_FOUND, cancelled=True, now_ms=10_000) == attempts.Park(13_001)
    assert wait(LedgerSilence.NOT_FOUND, cancelled=True, call_deadline_ms=11_000) == attempts.Park(11_001)
    # Known outcomes are recorded; a cancelled run sends nothing again.
    assert wait(OK, cancelled=True) == attempts.Adopt()
    assert wait(TRANSIENT, cancelled=True) == attempts.Adopt()


@given(
    word=st.sampled_from([LedgerSilence.UNKNOWN, LedgerSilence.NOT_FOUND, STOPPED, RUNNING, OK, TRANSIENT]),
    now_ms=st.integers(0, 10**7),
    call_deadline_ms=st.integers(0, 10**7),
)
def test_a_cancelled_run_never_parks_past_its_bound(word: object, now_ms: int, call_deadline_ms: int) -> None:
    got = wait(word, cancelled=True, now_ms=now_ms, call_deadline_ms=call_deadline_ms)
    if isinstance(got, attempts.Park):
        assert now_ms <= 13_000 and got.wake_ms <= 13_001
    assert not isinstance(got, attempts.Resend)


# -- model attempts ---------------------------------------------------------------------------------


def model(
    failure: attempts.ModelFailure, *, layer: TimeoutLayer = TimeoutLayer.CALL, attempt: int = 1, **kw: float
) -> attempts.ModelVerdict:
    return attempts.model_verdict(failure, attempt=attempt, clock=clock(layer, **kw), retry=RETRY, rand=0.5)


TRANSIENT_MODEL = attempts.ModelFailure(kind=attempts.ModelFailureKind.TRANSIENT, reason="rate_limited")


@pytest.mark.parametrize("layer", LAYERS)
def test_every_model_failure_kind_at_every_layer(layer: TimeoutLayer) -> None:
    auth = attempts.ModelFailure(kind=attempts.ModelFailureKind.AUTH, reason="unauthorized")
    bad = attempts.ModelFailure(kind=attempts.ModelFailureKind.PERMANENT, reason="context_length_exceeded")
    timed_out = attempts.ModelFailure(
        kind=attempts.ModelFailureKind.TRANSIENT, reason="timeout", timed_out=True
    )
    assert model(auth, layer=layer) == attempts.Fail("model_auth")
    assert model(bad, layer=layer) == attempts.Fail("model_error:context_length_exceeded")
    assert model(TRANSIENT_MODEL, layer=layer) == attempts.Retry(0.5)
    expected = attempts.StepTimeout() if layer is TimeoutLayer.STEP else attempts.Retry(0.5)
    assert model(timed_out, layer=layer) == expected


def test_a_model_retry_waits_its_retry_after_and_must_fit_the_calls_expected_time() -> None:
    later = attempts.ModelFailure(kind=attempts.ModelFailureKind.TRANSIENT, retry_after_s=7.0)
    assert model(later) == attempts.Retry(7.0)
    # The attempt failed at once, but the run's model calls take 30 s: a retry cannot finish.
    assert model(TRANSIENT_MODEL, began_s=NOW, run_left=20.0, expected_s=30.0) == attempts.Fail(
        "model_unavailable", retryable=True
    )
    assert model(TRANSIENT_MODEL, began_s=NOW, run_left=40.0, expected_s=30.0) == attempts.Retry(0.5)
    assert model(TRANSIENT_MODEL, began_s=NOW, step_left=20.0, expected_s=30.0) == attempts.StepTimeout(
        exhausted=True
    )
    assert model(TRANSIENT_MODEL, attempt=3) == attempts.Fail("model_unavailable", retryable=True)
