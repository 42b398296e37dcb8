"""What an attempt's outcome means: one pure verdict for tool and model attempts (§11.10).

The shell reports typed facts about one attempt: the tool host's code, whether the
attempt's own time ran out, whether a connection was made at all, whether the transport
broke after the request may have left, whether the host itself cannot tell. These
functions turn the facts, with the attempt's number, the retry policy and the deadlines
of its layers, into one verdict the shell carries out. They hold the one copy of "does a
retry still fit" (R6.4): now + delay + the call's expected time, before both the run's
and the step's deadline. Nothing here reads an error's text.

=================  ==========================================  =======================
verdict            what the shell does                         from
=================  ==========================================  =======================
``Send``           start the attempt with ``timeout_s``        plan_attempt
``Expire``         end the run EXPIRED: no time is left        plan_attempt
``StepTimeout``    end the call: its step's time is spent      all
``AskLedger``      ask the write's ledger before anything else tool_verdict
``Unknown``        nobody can tell what the write did          tool_verdict, ledger_*
``Retry``          the same call (same key) after ``delay_s``  tool_verdict, model_*
``Fail``           record the outcome, then the run ends       tool_verdict, model_*, recorded_verdict
``Pause``          record nothing; a person decides            tool_verdict
``Fenced``         this worker lost the run's lease            tool_verdict
``Done``           record the outcome as it is                 tool_verdict, ledger_*
``Adopt``          the ledger's outcome replaces the attempt's ledger_after_doubt
``Resend``         send the write again, same key              ledger_*
``Park``           ask the ledger again at ``wake_ms``         ledger_in_wait
``NeverRan``       record the write as never run (cancelled)   ledger_in_wait
``HandOver``       end the cancelled run, listing it unknown   ledger_in_wait
=================  ==========================================  =======================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from agentrt.server.core._deadline import (
    TimeoutLayer,
    backoff_delay_s,
    call_budget,
    call_timeout_s,
    retry_fits,
)
from agentrt.server.core._events import ToolErrorCode
from agentrt.server.core._outcomes import LedgerSilence, LedgerWord, ToolOutcome

__all__ = [
    "Adopt",
    "AskLedger",
    "AttemptClock",
    "Done",
    "Expire",
    "Fail",
    "Fenced",
    "HandOver",
    "ModelFailure",
    "ModelFailureKind",
    "ModelVerdict",
    "NeverRan",
    "Park",
    "Pause",
    "Resend",
    "Retry",
    "RetryPolicy",
    "Send",
    "StepTimeout",
    "TimeoutLayer",
    "ToolVerdict",
    "UnauthorizedPolicy",
    "Unknown",
    "child_time_left_s",
    "cleanup_deadline_ms",
    "cleanup_timeout_s",
    "cleanup_verdict",
    "did_not_complete",
    "ledger_after_doubt",
    "ledger_before_resend",
    "ledger_in_wait",
    "model_verdict",
    "plan_attempt",
    "recorded_verdict",
    "tool_verdict",
]


def did_not_complete(outcome: ToolOutcome) -> bool:
    """A failure in the tool's own words that leaves nothing done: the same key may run it again.

    Never true of an outcome the host is unsure of: a tool stopped where it stood, or still running.
    """
    return not outcome.in_doubt and outcome.code in (ToolErrorCode.TRANSIENT, ToolErrorCode.CANCELLED)


# -- verdicts ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    timeout_s: float
    layer: TimeoutLayer  # the layer whose time is shortest: a timeout of this attempt is that layer's


@dataclass(frozen=True, slots=True)
class Expire:
    pass


@dataclass(frozen=True, slots=True)
class StepTimeout:
    exhausted: bool = False  # attempts were left, only the step's deadline stopped a retry


@dataclass(frozen=True, slots=True)
class AskLedger:
    pass


@dataclass(frozen=True, slots=True)
class Unknown:
    pass


@dataclass(frozen=True, slots=True)
class Retry:
    delay_s: float


@dataclass(frozen=True, slots=True)
class Fail:
    reason: str  # the run's reason, e.g. "idempotency_conflict"
    retryable: bool = False


@dataclass(frozen=True, slots=True)
class Pause:
    reason: str  # what a person is asked to settle, e.g. "tool_unauthorized:refund"


@dataclass(frozen=True, slots=True)
class Fenced:
    pass


@dataclass(frozen=True, slots=True)
class Done:
    exhausted: bool = False  # a transient failure with no retry left (counted as exhausted)


@dataclass(frozen=True, slots=True)
class Adopt:
    pass


@dataclass(frozen=True, slots=True)
class Resend:
    pass


@dataclass(frozen=True, slots=True)
class Park:
    wake_ms: int


@dataclass(frozen=True, slots=True)
class NeverRan:
    pass


@dataclass(frozen=True, slots=True)
class HandOver:
    pass


class UnauthorizedPolicy(StrEnum):
    """What a tool's UNAUTHORIZED does to its run (R6.3): fail it, or pause it for a person."""

    FAIL = "fail"
    PAUSE = "pause"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    max_attempts: int
    base_s: float
    cap_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptClock:
    """When an attempt ran, the deadlines that bound it, and which layer bound it (epoch seconds)."""

    began_s: float
    now_s: float
    step_deadline_s: float
    run_deadline_s: float
    layer: TimeoutLayer = TimeoutLayer.CALL
    expected_s: float = 0.0  # what a call is expected to take beyond this attempt's own time

    def retry_fits(self, delay_s: float) -> tuple[bool, bool]:
        """Whether a retry after ``delay_s`` can finish before the run's, and the step's, deadline.

        The retry is expected to take what this attempt took, or ``expected_s`` if that is longer.
        """
        expected = max(self.now_s - self.began_s, self.expected_s)
        fits_run = retry_fits(
            now_s=self.now_s, delay_s=delay_s, expected_call_s=expected, deadline_s=self.run_deadline_s
        )
        fits = fits_run and retry_fits(
            now_s=self.now_s,
            delay_s=delay_s,
            expected_call_s=expected,
            deadline_s=self.run_deadline_s,
            step_deadline_s=self.step_deadline_s,
        )
        return fits_run, fits


ToolVerdict = AskLedger | StepTimeout | Retry | Fail | Pause | Fenced | Done


def plan_attempt(
    *, now_s: float, call_timeout_s: float, step_deadline_s: float, run_deadline_s: float, reserve_s: float
) -> Send | StepTimeout | Expire:
    """Whether an attempt may start now and with what timeout: the smallest time left wins.

    A tie goes to the outer layer (run before step before call), the one that explains more.
    """
    budget = call_budget(
        now_s=now_s,
        call_timeout_s=call_timeout_s,
        step_deadline_s=step_deadline_s,
        run_deadline_s=run_deadline_s,
        reserve_s=reserve_s,
    )
    if budget.timeout_s > 0:
        return Send(budget.timeout_s, budget.layer)
    return StepTimeout() if budget.layer is TimeoutLayer.STEP else Expire()


def tool_verdict(
    outcome: ToolOutcome,
    *,
    tool: str,
    attempt: int,
    write: bool,
    cancelled: bool,
    clock: AttemptClock,
    retry: RetryPolicy,
    rand: float,
    reconciled: bool = False,
    on_unauthorized: UnauthorizedPolicy = UnauthorizedPolicy.FAIL,
) -> ToolVerdict:
    """What one tool attempt's outcome means for its call and run.

    Args:
        outcome: The attempt's outcome (or, once ``reconciled``, the ledger's that replaced it).
        attempt: This attempt's number, from 1.
        write: Neither read-only nor idempotent: never sent again on a guess (invariant 3).
        cancelled: The run was asked to cancel: nothing is retried.
        reconciled: The ledger was asked already; an in-doubt write it has no entry of never ran.
        rand: A number in [0, 1) for the backoff's jitter.
    """
    if write and outcome.in_doubt and not reconciled and outcome.code is not ToolErrorCode.FENCED:
        return AskLedger()
    settled = recorded_verdict(outcome, tool=tool, cancelled=cancelled, on_unauthorized=on_unauthorized)
    if not isinstance(settled, Done) or outcome.code is None:
        return settled
    if outcome.timed_out and clock.layer is TimeoutLayer.STEP:
        return StepTimeout()
    if outcome.code is not ToolErrorCode.TRANSIENT or cancelled:
        return Done()
    delay_s = backoff_delay_s(attempt=attempt, base_s=retry.base_s, cap_s=retry.cap_s, rand=rand)
    if outcome.never_sent and outcome.retry_after_s is not None:
        # The host refused it untaken and said when to come back (a drain): not sooner.
        delay_s = max(delay_s, outcome.retry_after_s)
    return _retry_or(Done(exhausted=True), attempt=attempt, clock=clock, retry=retry, delay_s=delay_s)


def recorded_verdict(
    outcome: ToolOutcome,
    *,
    tool: str,
    cancelled: bool,
    on_unauthorized: UnauthorizedPolicy = UnauthorizedPolicy.FAIL,
) -> Fenced | Fail | Pause | Done:
    """What a settled outcome, as it is recorded, means for the run (no retry is weighed here).

    The host refusing the lease's fencing token means this worker lost the run (Fenced); a tool
    refusing the runtime's authority fails the run or pauses it for a person (R6.3); a key reused
    with other arguments fails it: the runtime's keys are broken, not the model's call.
    """
    code = outcome.code
    if code is ToolErrorCode.FENCED:
        return Fenced()
    if code is ToolErrorCode.UNAUTHORIZED:
        reason = f"tool_unauthorized:{tool}"
        return (
            Pause(reason) if on_unauthorized is UnauthorizedPolicy.PAUSE and not cancelled else Fail(reason)
        )
    if code is ToolErrorCode.KEY_CONFLICT:
        return Fail("idempotency_conflict")
    return Done()


def _retry_or(
    exhausted: Done | Fail, *, attempt: int, clock: AttemptClock, retry: RetryPolicy, delay_s: float
) -> Retry | StepTimeout | Done | Fail:
    """A retry if one is left and fits; else StepTimeout when only the step stops it; else ``exhausted``."""
    fits_run, fits = clock.retry_fits(delay_s)
    if attempt < retry.max_attempts and fits:
        return Retry(delay_s)
    if attempt < retry.max_attempts and fits_run:
        return StepTimeout(exhausted=True)
    return exhausted


def ledger_after_doubt(word: LedgerWord) -> Adopt | Unknown | Done:
    """An in-doubt write's ledger was asked: its outcome replaces the attempt's (Adopt), nobody
    can tell (Unknown), or it has no entry, so the attempt's own outcome stands (Done)."""
    if isinstance(word, LedgerSilence):
        return Done() if word is LedgerSilence.NOT_FOUND else Unknown()
    return Unknown() if word.in_doubt else Adopt()


def ledger_before_resend(word: LedgerWord, *, cancelled: bool) -> Adopt | Resend | Unknown:
    """A write an earlier owner started (or an earlier attempt of it): its ledger decides.

    Sent again, same key, only when the ledger never saw it or says it provably did not complete,
    and the run is not cancelled: a cancelled run's earlier request may still be on its way.
    """
    if isinstance(word, ToolOutcome) and not word.in_doubt:
        return Resend() if did_not_complete(word) and not cancelled else Adopt()
    if word is LedgerSilence.NOT_FOUND and not cancelled:
        return Resend()
    return Unknown()


def ledger_in_wait(
    word: LedgerWord,
    *,
    cancelled: bool,
    now_ms: int,
    call_deadline_ms: int,
    cancel_requested_ms: int,
    cancel_wait_ms: int,
    ask_again_ms: int,
) -> Adopt | Resend | NeverRan | Park | HandOver:
    """The run waits in UNKNOWN_OUTCOME for a write's ledger: what its latest answer means.

    A run not cancelled waits as long as it takes (escalation brings a person). A cancelled run
    ends within a bound (§11.11): a write whose host stopped it where it stood, and cannot tell,
    is handed over at once (the run ends CANCELLED listing it as unknown, for a person); one still
    running, or a host that does not answer, is asked again until ``cancel_wait_ms`` after the
    cancel, then handed over; one its ledger never saw never ran once its attempt's deadline (and
    so its grant) has passed.

    Args:
        call_deadline_ms: The deadline of the attempt in doubt (0: not known).
        cancel_requested_ms: When the cancel was requested (unused when not cancelled).
        cancel_wait_ms: How long a cancelled run waits for its writes to settle.
        ask_again_ms: When to ask again (the reconcile backoff, drawn by the caller).
    """
    if isinstance(word, ToolOutcome) and not word.in_doubt:
        return Resend() if did_not_complete(word) and not cancelled else Adopt()
    if not cancelled:
        return Resend() if word is LedgerSilence.NOT_FOUND else Park(ask_again_ms)
    settle_by_ms = cancel_requested_ms + cancel_wait_ms
    if word is LedgerSilence.NOT_FOUND:
        if now_ms > call_deadline_ms:
            return NeverRan()
        return HandOver() if now_ms > settle_by_ms else Park(min(call_deadline_ms, settle_by_ms) + 1)
    stopped = isinstance(word, ToolOutcome) and word.host_unsure and not word.still_running
    if stopped or now_ms > settle_by_ms:
        return HandOver()
    return Park(min(ask_again_ms, settle_by_ms + 1))


def child_time_left_s(*, now_s: float, run_deadline_s: float, reserve_s: float) -> float:
    """What a child run may take: the parent's time left less its reserve (0: none)."""
    return call_timeout_s(
        now_s=now_s, run_deadline_s=run_deadline_s, call_timeout_s=math.inf, reserve_s=reserve_s
    )


# -- cleanup attempts -------------------------------------------------------------------------------


def cleanup_deadline_ms(*, now_ms: int, deadline_s: float) -> int:
    """When a run's cleanups must be done, set by its first cleanup attempt."""
    return now_ms + round(deadline_s * 1000)


def cleanup_timeout_s(*, call_timeout_s: float, now_ms: int, deadline_ms: int) -> float:
    """One cleanup attempt's timeout: its own, within what is left of the cleanup deadline."""
    return max(0.001, min(call_timeout_s, (deadline_ms - now_ms) / 1000))


def cleanup_verdict(
    *, retryable: bool, attempt: int, retry: RetryPolicy, now_ms: int, deadline_ms: int, rand: float
) -> Retry | Done:
    """A failed cleanup attempt: another after a backoff, or given up (the cleanup job asks later)."""
    delay = backoff_delay_s(attempt=attempt, base_s=retry.base_s, cap_s=retry.cap_s, rand=rand)
    if not retryable or attempt >= retry.max_attempts or now_ms + delay * 1000 >= deadline_ms:
        return Done()
    return Retry(delay)


# -- model attempts ---------------------------------------------------------------------------------


class ModelFailureKind(StrEnum):
    TRANSIENT = "transient"  # rate limit, overload, a stream cut off, a timeout: try again
    AUTH = "auth"  # the provider refused the credentials
    PERMANENT = "permanent"  # anything else the provider said no to


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFailure:
    """What went wrong with one model attempt, as the provider reported it (typed)."""

    kind: ModelFailureKind
    reason: str = ""  # the provider error's stable reason, e.g. "rate_limited"
    retry_after_s: float | None = None
    timed_out: bool = False
    connect_failed: bool = False


ModelVerdict = Retry | StepTimeout | Fail


def model_verdict(
    failure: ModelFailure, *, attempt: int, clock: AttemptClock, retry: RetryPolicy, rand: float
) -> ModelVerdict:
    """What a failed model attempt means for its step (the step is retried whole, or the run ends).

    A retry waits the provider's ``retry_after`` or the backoff, whichever is longer, and must fit
    with the call's expected time (``clock.expected_s``: the run's model calls so far) (R6.4).
    """
    if failure.kind is ModelFailureKind.AUTH:
        return Fail("model_auth")
    if failure.kind is ModelFailureKind.PERMANENT:
        return Fail(f"model_error:{failure.reason}")
    if failure.timed_out and clock.layer is TimeoutLayer.STEP:
        return StepTimeout()
    backoff = backoff_delay_s(attempt=attempt, base_s=retry.base_s, cap_s=retry.cap_s, rand=rand)
    delay = max(failure.retry_after_s or 0.0, backoff)
    verdict = _retry_or(
        Fail("model_unavailable", retryable=True), attempt=attempt, clock=clock, retry=retry, delay_s=delay
    )
    assert not isinstance(verdict, Done)  # _retry_or gives back the exhausted verdict it was handed
    return verdict
