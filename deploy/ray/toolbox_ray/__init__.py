"""Placement of toolbox session servers on Ray: one named, detached ``SessionHost`` actor
per session, and the placement contract (docs/scale-out.md) as a Ray Serve application."""

from .config import ACTOR_PREFIX, NAMESPACE, SLOT, Config, ConfigError, actor_name, parse_sid

__all__ = ["ACTOR_PREFIX", "NAMESPACE", "SLOT", "Config", "ConfigError", "actor_name", "parse_sid"]
