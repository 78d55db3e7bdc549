"""jupyter_client's own round trip of the cell `x = 1` to the kernel of a connection file.

    python jupyter_client_roundtrip.py <connection file> <calls>

Prints one JSON line with every call's time in µs. A round trip is what a client waits for:
execute_request sent, outputs handled, execute_reply and the kernel's idle status received
(BlockingKernelClient.execute_interactive), the same wait as toolbox's jupyter backend.
"""

import json
import sys
import time

from jupyter_client import BlockingKernelClient

WARM_UP = 20


def main() -> None:
    connection_file, n = sys.argv[1], int(sys.argv[2])
    client = BlockingKernelClient(connection_file=connection_file)
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        for _ in range(WARM_UP):
            client.execute_interactive("x = 1", timeout=30, output_hook=lambda msg: None)
        times = []
        for _ in range(n):
            started = time.perf_counter()
            reply = client.execute_interactive("x = 1", timeout=30, output_hook=lambda msg: None)
            times.append((time.perf_counter() - started) * 1e6)
            assert reply["content"]["status"] == "ok", reply
    finally:
        client.stop_channels()
    print(json.dumps({"times_us": times}))


if __name__ == "__main__":
    main()
