"""Fixtures for the Ray suite: the simulated cluster of ``toolbox_ray.testing`` with the
real toolbox binary as the session servers.

``TOOLBOX_BIN`` names the toolbox binary [default: target/debug/toolbox of this checkout].
The router cases need a binary with ``toolbox router``: ``TOOLBOX_ROUTER_BIN`` [default: the
same binary, when it has the subcommand]. What is missing makes the tests skip, saying so.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

import pytest

# Before Ray is imported: without these it binds the machine's external address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.dirname(HERE))

# Without Ray the cluster cases skip (each of their modules starts with pytest.importorskip).
try:
    import ray  # noqa: F401
except ImportError:
    ray = None
if ray is not None:
    from toolbox_ray.testing import (  # noqa: E402,F401 - re-exported for the tests
        LIMIT,
        TIGHT,
        Response,
        SimCluster,
        Sse,
        host_pids,
        request,
        start_router,
        wait_until,
    )
else:
    TIGHT = None


def toolbox_bin() -> str:
    path = os.environ.get("TOOLBOX_BIN") or os.path.join(REPO, "target", "debug", "toolbox")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no toolbox binary at {path}: build it (cargo build) or set TOOLBOX_BIN")
    return os.path.abspath(path)


def router_bin() -> str:
    path = os.environ.get("TOOLBOX_ROUTER_BIN") or toolbox_bin()
    if not os.access(path, os.X_OK):
        pytest.skip(f"no binary at TOOLBOX_ROUTER_BIN={path}")
    out = subprocess.run(
        [path, "router", "--help"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )
    if out.returncode != 0:
        pytest.skip(f"{path} has no `toolbox router` (set TOOLBOX_ROUTER_BIN to a binary with it)")
    return path


@pytest.fixture
def sim_cluster() -> Iterator[Any]:
    """A factory: ``sim_cluster(slots=…, nodes=…, system_config=…, **config)``; shut down,
    and checked for orphaned session servers, after the test."""
    binary = toolbox_bin()
    made: list[SimCluster] = []
    tmp = tempfile.mkdtemp(prefix="toolbox-ray-test-")

    def make(slots: int = 12, nodes: int = 3, system_config: dict[str, Any] | None = TIGHT, **cfg: Any) -> SimCluster:
        c = SimCluster(tmp, binary, slots, nodes, system_config, **cfg)
        made.append(c)
        return c

    yield make
    for c in made:
        c.shutdown()
    # No session server outlives its actor: the parent-death signal ends every one.
    deadline = time.monotonic() + 30
    left = host_pids(tmp)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = host_pids(tmp)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(tmp, ignore_errors=True)
    assert not left, f"session servers left running after the cluster ended: {left}"


