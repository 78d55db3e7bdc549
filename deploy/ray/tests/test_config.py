"""The adapter's configuration and the session id rule, without a cluster."""

from __future__ import annotations

import json

import pytest

from toolbox_ray.config import Config, ConfigError, actor_name, parse_sid


def test_session_ids_follow_the_contract():
    for good in ("s1", "a.b_c-d", "x" * 128, "0"):
        assert parse_sid(good) == good
    for bad in ("", ".hidden", "..", "a/b", "a b", "x" * 129, "é", "a:ensure", "%2e"):
        assert parse_sid(bad) is None, bad
    assert actor_name("s1") == "toolbox:session:s1"


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"toolbox_bin": "toolbox"}, "toolbox_bin must be an absolute path"),
        ({"state_store": "http://x"}, "state_store must be file:///folder or s3://"),
        ({"state_store": "file://rel/x"}, "needs an absolute path"),
        ({"work_root": "rel"}, "work_root must be an absolute path"),
        ({"idle_park_s": 0}, "idle_park_s must be a number of seconds above 0"),
        ({"place_timeout_s": "5"}, "place_timeout_s must be"),
        ({"retry_after_s": 0}, "retry_after_s must be 1-3600"),
        ({"placement_token": "a-long-random-secret-0123"}, "name that file with placement_token_file"),
        ({"placement_token_file": "token"}, "placement_token_file must be an absolute path"),
        ({"isolate_hosts": "yes"}, "isolate_hosts must be true or false"),
        ({"work_root": "/srv/ray", "state_store": "file:///srv/ray/store"}, "state_store '/srv/ray/store' is inside work_root"),
        ({"host_args": ["--token-sha256", "00"]}, "host_args may not set --token-sha256"),
        ({"host_args": ["--token-fd=3"]}, "host_args may not set --token-fd=3"),
        ({"host_args": ["--sandbox", "off"]}, "--sandbox off would let shell commands open network sockets"),
        ({"host_args": ["--sandbox=off"]}, "--sandbox off would let"),
        ({"host_args": ["--epoch=3"]}, "host_args may not set --epoch=3"),
        ({"host_args": ["--workspace", "/x"]}, "host_args may not set --workspace"),
        ({"bogus": 1}, "unknown configuration keys ['bogus']"),
    ],
)
def test_a_bad_configuration_is_refused_naming_the_key(fields, says):
    data = {"toolbox_bin": "/usr/bin/toolbox", "state_store": "file:///srv/store", **fields}
    with pytest.raises(ConfigError, match=None) as e:
        Config.from_dict(data)
    assert says in str(e.value)


def test_a_configuration_file_round_trips(tmp_path):
    path = tmp_path / "placement.json"
    path.write_text(
        json.dumps(
            {
                "toolbox_bin": "/usr/bin/toolbox",
                "state_store": "s3://bucket/prefix",
                "host_args": ["--sync-every", "10s"],
                "host_env": {"AWS_REGION": "eu-west-1"},
            }
        )
    )
    cfg = Config.from_file(str(path))
    assert cfg.host_args == ("--sync-every", "10s")
    assert dict(cfg.host_env) == {"AWS_REGION": "eu-west-1"}
    assert cfg.store_folder is None
    assert Config.from_dict(cfg.to_dict()) == cfg
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(ConfigError, match="a JSON object expected"):
        Config.from_file(str(tmp_path / "bad.json"))
