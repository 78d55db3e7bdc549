"""Who may talk to whom, asked of the manifests' NetworkPolicies (and the session server
template's managed policy) with tests/netpol.py: clients reach the router, the router the
adapter and the session servers, the adapter the API server and the session servers' ports;
session servers reach neither the router nor the adapter, and none of the special-purpose
address ranges."""

from __future__ import annotations

import glob
import ipaddress
import os

import pytest
import yaml

from conftest import K8S_DIR
from netpol import Peer, allowed, from_sandbox_template

MANIFESTS = sorted(glob.glob(os.path.join(K8S_DIR, "manifests", "*.yaml")))
NS = "toolbox"


def _part(name: str) -> dict:
    """The labels the manifests give a part's pods."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "toolbox"}


ROUTER = Peer("10.244.1.10", NS, _part("toolbox-router"))
ADAPTER = Peer("10.244.1.20", NS, _part("toolbox-placement"))
HOST = Peer("10.244.2.30", NS, _part("toolbox-host"))
OTHER_HOST = Peer("10.244.3.31", NS, _part("toolbox-host"))
CLIENT = Peer("10.244.4.40", "agents", {"app": "my-agent"})
# A pod of the toolbox namespace that is none of the parts (a debugging pod, say).
STRAY = Peer("10.244.4.41", NS, {"app": "debug"})
API_SERVER = Peer("172.18.0.2")  # the control plane, outside the pod network
PUBLIC = Peer("93.184.215.14")
METADATA = Peer("169.254.169.254")

ROUTER_PORT, ADAPTER_PORT, HOST_PORT, GATE_PORT = 7900, 8080, 7878, 7879

# Every IPv4 and IPv6 range that is not the public internet (IANA's special-purpose
# registries): the cluster's own networks, the cloud metadata address, loopback, and the
# ranges a NAT or a translator could route somewhere private.
SPECIAL_V4 = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
              "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24",
              "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
              "224.0.0.0/4", "240.0.0.0/4"]
SPECIAL_V6 = ["::/128", "::1/128", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48",
              "100::/64", "2001::/23", "2001:db8::/32", "2002::/16", "fc00::/7", "fe80::/10",
              "fec0::/10", "ff00::/8"]
# The metadata services' own addresses (AWS, GCP, Azure, Alibaba, Oracle; AWS's IPv6 one).
METADATA_ADDRESSES = ["169.254.169.254", "169.254.170.2", "100.100.100.200",
                      "192.0.0.192", "fd00:ec2::254"]


def _docs() -> list[dict]:
    docs = []
    for path in MANIFESTS:
        with open(path, encoding="utf-8") as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d)
    return docs


def _policies() -> list[dict]:
    docs = _docs()
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    policies += [from_sandbox_template(d) for d in docs if d["kind"] == "SandboxTemplate"]
    return policies


def _samples(cidr: str) -> list[str]:
    """The first, a middle and the last address of a range."""
    net = ipaddress.ip_network(cidr)
    return [str(net[0]), str(net[net.num_addresses // 2]), str(net[-1])]


def test_the_router_and_the_adapter_have_network_policies():
    names = {}
    for p in [d for d in _docs() if d["kind"] == "NetworkPolicy"]:
        assert p["metadata"]["namespace"] == NS
        # Both directions, said outright: a policy without Egress leaves egress open.
        assert sorted(p["spec"]["policyTypes"]) == ["Egress", "Ingress"], p["metadata"]
        names[p["metadata"]["name"]] = p["spec"]["podSelector"]
    assert names == {
        "toolbox-router": {"matchLabels": {"app.kubernetes.io/name": "toolbox-router"}},
        "toolbox-placement": {"matchLabels": {"app.kubernetes.io/name": "toolbox-placement"}},
    }


@pytest.mark.parametrize("src,dst,port,expected", [
    # Clients reach the router, and only the router.
    (CLIENT, ROUTER, ROUTER_PORT, True),
    (CLIENT, ADAPTER, ADAPTER_PORT, False),
    (CLIENT, HOST, HOST_PORT, False),
    (CLIENT, HOST, GATE_PORT, False),
    (STRAY, ADAPTER, ADAPTER_PORT, False),
    # The router reaches the adapter and the session servers' API, not their gate.
    (ROUTER, ADAPTER, ADAPTER_PORT, True),
    (ROUTER, HOST, HOST_PORT, True),
    (ROUTER, HOST, GATE_PORT, False),
    (ROUTER, API_SERVER, 443, False),
    (ROUTER, PUBLIC, 443, False),
    (ROUTER, ROUTER, ROUTER_PORT, False),
    # The adapter reaches the API server and the session servers (health, park, and the
    # gate).
    (ADAPTER, API_SERVER, 443, True),
    (ADAPTER, API_SERVER, 6443, True),
    (ADAPTER, HOST, HOST_PORT, True),
    (ADAPTER, HOST, GATE_PORT, True),
    (ADAPTER, ROUTER, ROUTER_PORT, False),
    (ADAPTER, PUBLIC, 80, False),
    # Session servers never reach the router, the adapter, each other or the API server.
    (HOST, ROUTER, ROUTER_PORT, False),
    (HOST, ADAPTER, ADAPTER_PORT, False),
    (HOST, ADAPTER, 443, False),
    (HOST, OTHER_HOST, HOST_PORT, False),
    (HOST, OTHER_HOST, GATE_PORT, False),
    (HOST, API_SERVER, 443, False),
    (HOST, API_SERVER, 6443, False),
    # ...but the web and the state store, over 80/443.
    (HOST, PUBLIC, 443, True),
    (HOST, PUBLIC, 80, True),
    (HOST, PUBLIC, 22, False),
])
def test_who_may_talk_to_whom(src, dst, port, expected):
    assert allowed(_policies(), src, dst, port) is expected, (src, dst, port)


def test_dns_is_open_to_each_part():
    for pod in (ROUTER, ADAPTER, HOST):
        assert allowed(_policies(), pod, Peer("10.96.0.10"), 53, "UDP"), pod
        assert allowed(_policies(), pod, Peer("10.96.0.10"), 53, "TCP"), pod


@pytest.mark.parametrize("cidr", SPECIAL_V4 + SPECIAL_V6)
def test_hosts_reach_no_special_purpose_range(cidr):
    """Beyond DNS (port 53, which cluster DNS needs wherever it runs), a session server
    reaches no address of any special-purpose range on any port the policy names, nor on
    others."""
    policies = _policies()
    for ip in _samples(cidr):
        for port in (80, 443, 8080, 22):
            assert not allowed(policies, HOST, Peer(ip), port), (cidr, ip, port)


def test_hosts_reach_no_metadata_service():
    policies = _policies()
    for ip in METADATA_ADDRESSES:
        for port in (80, 443):
            assert not allowed(policies, HOST, Peer(ip), port), ip


def test_the_host_egress_rule_lists_every_ipv4_range():
    """The same, read off the manifest: the one rule that opens the internet excepts every
    special-purpose IPv4 range (an IPv6 rule, if one is ever added, must do the same)."""
    template = next(d for d in _docs() if d["kind"] == "SandboxTemplate")
    blocks = [peer["ipBlock"] for rule in template["spec"]["networkPolicy"]["egress"]
              for peer in rule.get("to") or [] if "ipBlock" in peer]
    assert blocks, "the host template has no ipBlock egress rule"
    for block in blocks:
        net = ipaddress.ip_network(block["cidr"])
        excepted = [ipaddress.ip_network(e) for e in block.get("except") or []]
        wanted = SPECIAL_V4 if net.version == 4 else SPECIAL_V6
        for cidr in wanted:
            special = ipaddress.ip_network(cidr)
            assert any(special.subnet_of(e) for e in excepted if e.version == special.version), \
                f"{block['cidr']} does not except {cidr}"


def test_the_evaluator_can_say_yes_and_no():
    """The evaluator itself: an open pod, a default deny, an ipBlock except."""
    open_pod = Peer("10.0.0.1", "elsewhere", {"app": "x"})
    assert allowed([], CLIENT, open_pod, 1)
    deny = {"metadata": {"name": "d", "namespace": "elsewhere"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    assert not allowed([deny], CLIENT, open_pod, 1)
    assert not allowed([deny], open_pod, PUBLIC, 443)
    web = {"metadata": {"name": "w", "namespace": "elsewhere"},
           "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                    "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0",
                                                    "except": ["10.0.0.0/8"]}}],
                                "ports": [{"protocol": "TCP", "port": 443}]}]}}
    assert allowed([web], open_pod, PUBLIC, 443)
    assert not allowed([web], open_pod, PUBLIC, 80)
    assert not allowed([web], open_pod, Peer("10.1.2.3"), 443)
    assert not allowed([web], open_pod, Peer("2001:4860::1"), 443)
