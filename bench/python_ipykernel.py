"""Round trips of the cell `x = 1` in an ipykernel through jupyter_client.

Prints one JSON line: {"median_us": …, "mean_us": …, "p95_us": …, "n": …}. A round trip is
what a client waits for: execute_request sent, outputs handled, execute_reply and the
kernel's idle status received (jupyter_client's execute_interactive).
"""

import json
import statistics
import sys
import time

from jupyter_client.manager import start_new_kernel


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        for _ in range(30):  # warm up: the first cells import the display machinery
            kc.execute_interactive("x = 1", timeout=30, output_hook=lambda msg: None)
        times = []
        for _ in range(n):
            started = time.perf_counter()
            reply = kc.execute_interactive("x = 1", timeout=30, output_hook=lambda msg: None)
            times.append(time.perf_counter() - started)
            assert reply["content"]["status"] == "ok", reply
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    times.sort()
    print(
        json.dumps(
            {
                "median_us": statistics.median(times) * 1e6,
                "mean_us": statistics.fmean(times) * 1e6,
                "p95_us": times[int(len(times) * 0.95)] * 1e6,
                "n": n,
            }
        )
    )


if __name__ == "__main__":
    main()
