"""Start a run, follow its events, approve the call it pauses for, and follow it to its end.

Usage: python refund_with_approval.py HOST:PORT   (a runtime started with `agentrt serve --demo`)
"""

from __future__ import annotations

import sys

from agentrt.client import Client
from agentrt.proto.runtime.v1 import run_pb2


def main(target: str) -> int:
    with Client(target) as client:
        run_id = ""
        # RunAgent starts the run and streams its events until it ends or pauses. A pause ends the
        # stream with `run_waiting`: the stream's own note (seq 0), never stored in the run's log.
        with client.run_agent("refund-demo", "Please refund order A100, it arrived broken.") as events:
            for event in events:
                run_id = event.run_id
                print(event.seq, event.WhichOneof("event"))

        run = client.get_run(run_id)
        if run.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL:
            pending = run.pending_approval
            print("approving:", pending.impact_summary)
            # The hash and the revision say what was approved: exactly the call that was shown.
            client.resolve_approval(
                run_id,
                pending.approval_id,
                approve=True,
                args_hash=pending.args_hash,
                expected_revision=run.revision,
            )
            # Follow on from the last event seen: nothing twice, nothing missed.
            with client.stream_events(run_id, after_seq=run.last_seq, follow=True) as events:
                for event in events:
                    print(event.seq, event.WhichOneof("event"))
            run = client.get_run(run_id)

        print("ended:", run_pb2.RunPhase.Name(run.phase))
        return 0 if run.phase == run_pb2.RUN_PHASE_COMPLETED else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
