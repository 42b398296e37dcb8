"""Peak memory of the runtime and the tool host around large tool results (R8.4).

One real tool host (``agentrt.plugins.blob_tools``) and one runtime (SQLite, payloads in the database or
``--store file``). For each size, one run calls ``blob.make`` once; the script prints the peak RSS
(VmHWM) of both processes after the run, and the growth over the previous peak. Sizes run in
increasing order, since a peak only grows. A result past ``max_tool_result_bytes`` (64 MiB) is
refused by the tool host: the runtime's peak must not move for it.

Run: ``python bench/payload_memory.py`` (``--sizes-mb 1 10 60 200 --store db``). Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from step_loop import peak_rss_mb  # noqa: E402

from agentrt.client import Client  # noqa: E402
from agentrt.testing import spawn_runtime, spawn_tool_host  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def agent(name: str, size: int) -> str:
    call = {"tool": "blob.make", "arguments": {"size_bytes": size, "seed": name}}
    steps = json.dumps([{"text": "making", "tool_calls": [call]}, {"text": "done"}])
    return (
        f'[agents."{name}"]\ninstructions = "bench"\ntools = ["blob.make"]\n'
        f'model = {{ provider = "scripted", options = {{ steps = {_toml(steps)} }} }}\n'
        "budgets = { timeout_s = 300 }\n"
    )


def _toml(steps_json: str) -> str:
    # The steps as a TOML array of inline tables (JSON scalars are valid TOML).
    def value(v: object) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f'"{k}" = {value(x)}' for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    return value(json.loads(steps_json))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 10, 60, 200])
    parser.add_argument("--store", choices=["db", "file"], default="db")
    args = parser.parse_args()
    sizes = sorted(int(mb * 1000 * 1000) for mb in args.sizes_mb)
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-payloads-") as tmp:
        work = Path(tmp)
        with spawn_tool_host(work / "host", plugins=["agentrt.plugins.blob_tools"]) as host:
            config = work / "agentrt.toml"
            text = (
                f'db_url = "sqlite:///{work / "agentrt.sqlite"}"\ndata_dir = "{work / "data"}"\n'
                f'[[tool_hosts]]\nname = "blobs"\naddress = "{host.address}"\n'
                f'[payloads]\nstore = "{args.store}"\n'
            )
            text += "".join(agent(f"blob-{size}", size) for size in sizes)
            config.write_text(text)
            with (
                spawn_runtime(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=work) as runtime,
                Client(runtime.address, timeout=300) as client,
            ):
                pid = runtime.process.pid
                last_rt, last_host = peak_rss_mb(pid), peak_rss_mb(host.pid)
                print(f"store={args.store}: runtime peak {last_rt:.0f} MB, host peak {last_host:.0f} MB")
                for size in sizes:
                    began = time.perf_counter()
                    events = list(client.run_agent(f"blob-{size}", "go", timeout=300))
                    took = time.perf_counter() - began
                    done = [e for e in events if e.HasField("tool_completed")]
                    outcome = (
                        f"stored as payload ({done[0].tool_completed.result_ref.size_bytes} bytes)"
                        if done
                        else "refused: "
                        + next(e.tool_failed.error.message for e in events if e.HasField("tool_failed"))
                    )
                    rt, hp = peak_rss_mb(pid), peak_rss_mb(host.pid)
                    growth = (rt - last_rt) * 1e6 / max(size, 1)
                    print(
                        f"{size / 1e6:7.1f} MB result, {took:5.1f}s, {outcome}\n"
                        f"    runtime peak {rt:6.0f} MB (+{rt - last_rt:4.0f}, {growth:.2f}x the result),"
                        f" now {rss_mb(pid):.0f} MB; tool host peak {hp:6.0f} MB (+{hp - last_host:4.0f})"
                    )
                    last_rt, last_host = rt, hp


if __name__ == "__main__":
    main()
