"""``python -m toolbox_ray --config placement.json``: deploy the adapter on a running cluster."""

from __future__ import annotations

import argparse
import sys

import ray

from .adapter import check_listen, deploy
from .config import Config, ConfigError

CONTROL = "toolbox_control"
"""The resource of the node(s) where the adapter's replicas run: the head, where no session
server runs, so the placement token's file (and the adapter's key) are out of the session
servers' reach."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toolbox_ray", description=__doc__)
    parser.add_argument("--config", required=True, help="the adapter's JSON configuration")
    parser.add_argument("--address", default="auto", help="the Ray cluster [default: auto]")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="where Serve listens; beyond loopback the configuration needs placement_token_file [default: 127.0.0.1]",
    )
    parser.add_argument("--port", type=int, default=7901, help="[default: 7901]")
    parser.add_argument("--replicas", type=int, default=1, help="adapter replicas [default: 1]")
    args = parser.parse_args(argv)
    try:
        config = Config.from_file(args.config)
        check_listen(config, args.host)
    except (OSError, ConfigError) as e:
        print(f"toolbox_ray: {e}", file=sys.stderr)
        return 2
    ray.init(address=args.address, namespace="toolbox")
    if ray.cluster_resources().get(CONTROL, 0) <= 0:
        print(
            f"toolbox_ray: no node offers the resource {CONTROL}: start the head with "
            f"--resources='{{\"{CONTROL}\": 1}}' (the adapter's replicas run there, away from the session servers)",
            file=sys.stderr,
        )
        return 2
    share = min(0.01, ray.cluster_resources()[CONTROL] / max(1, args.replicas))
    url = deploy(
        config,
        host=args.host,
        port=args.port,
        actor_options_={"resources": {CONTROL: share}},
        replicas=args.replicas,
    )
    print(f"toolbox_ray: placement adapter at {url}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
