"""An OTLP receiver in a process of its own, for the benchmark's traced passes.

Run in the bench's own process, the receiver would decode every span under the GIL the client
also needs, and charge a collector's work to the runtime. It prints its gRPC endpoint on one line,
its HTTP one on the next, then, once its stdin closes, the number of spans it received.
"""

from __future__ import annotations

import sys

from agentrt.testing.otlp import OtlpReceiver


def main() -> None:
    with OtlpReceiver.running() as receiver:
        print(receiver.grpc_endpoint, flush=True)
        print(receiver.http_endpoint, flush=True)
        sys.stdin.read()
        print(len(receiver.spans), flush=True)


if __name__ == "__main__":
    main()
