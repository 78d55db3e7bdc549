"""A small evaluator of Kubernetes NetworkPolicies, for asking the manifests who may talk
to whom without a cluster.

It follows the API's semantics: a pod selected by no policy of a direction is open in that
direction; a selected pod allows what the union of its policies' rules allows; a rule's
peers are ORed, and `namespaceSelector` with `podSelector` in one peer are ANDed. Where
implementations differ it takes the permissive reading, so a "denied" here is denied
everywhere: an `ipBlock` matches pod addresses too (Calico does this), and a rule without
`to`/`from` matches every peer.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Peer:
    """A pod (namespace and labels) or an address outside the cluster (namespace None)."""

    ip: str
    namespace: str | None = None
    labels: dict = field(default_factory=dict)

    def __hash__(self):
        return hash((self.ip, self.namespace, tuple(sorted(self.labels.items()))))

    @property
    def is_pod(self) -> bool:
        return self.namespace is not None

    @property
    def namespace_labels(self) -> dict:
        return {"kubernetes.io/metadata.name": self.namespace} if self.is_pod else {}


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector: matchLabels ANDed with matchExpressions; {} matches everything."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"matchExpressions operator {op!r} is not one Kubernetes knows")
    return True


def ip_block_matches(block: dict, ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    net = ipaddress.ip_network(block["cidr"])
    if addr.version != net.version or addr not in net:
        return False
    return not any(addr in ipaddress.ip_network(e) for e in block.get("except") or []
                   if ipaddress.ip_network(e).version == addr.version)


def peer_matches(rule_peer: dict, policy_ns: str, peer: Peer) -> bool:
    if "ipBlock" in rule_peer:
        return ip_block_matches(rule_peer["ipBlock"], peer.ip)
    if not peer.is_pod:
        return False  # pod and namespace selectors select pods only
    ns_sel = rule_peer.get("namespaceSelector")
    pod_sel = rule_peer.get("podSelector")
    if ns_sel is None:
        # A podSelector alone selects pods of the policy's own namespace.
        return peer.namespace == policy_ns and selector_matches(pod_sel, peer.labels)
    return selector_matches(ns_sel, peer.namespace_labels) and \
        selector_matches(pod_sel, peer.labels)


def port_matches(rule_ports: list | None, port: int, protocol: str) -> bool:
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        if not isinstance(p["port"], int):
            raise ValueError(f"named port {p['port']!r}: this evaluator wants numbers")
        if p["port"] <= port <= p.get("endPort", p["port"]):
            return True
    return False


def _direction_allows(policies: list[dict], pod: Peer, other: Peer, port: int,
                      protocol: str, direction: str) -> bool:
    """Whether `pod`'s policies of `direction` ("Ingress" from `other` to `port`, or
    "Egress" from `pod` to `other`:`port`) allow the connection."""
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in policies
                 if p["metadata"]["namespace"] == pod.namespace
                 and selector_matches(p["spec"]["podSelector"], pod.labels)
                 and direction in policy_types(p)]
    if not selecting:
        return True
    for policy in selecting:
        ns = policy["metadata"]["namespace"]
        for rule in policy["spec"].get(key) or []:
            peers = rule.get(peers_key)
            if peers is not None and not any(peer_matches(r, ns, other) for r in peers):
                continue
            if port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def policy_types(policy: dict) -> list[str]:
    spec = policy["spec"]
    if "policyTypes" in spec:
        return spec["policyTypes"]
    return ["Ingress"] + (["Egress"] if "egress" in spec else [])


def allowed(policies: list[dict], src: Peer, dst: Peer, port: int,
            protocol: str = "TCP") -> bool:
    """Whether a connection from `src` to `dst`:`port` gets through every policy on its way:
    the source pod's egress and the destination pod's ingress."""
    if src.is_pod and not _direction_allows(policies, src, dst, port, protocol, "Egress"):
        return False
    if dst.is_pod and not _direction_allows(policies, dst, src, port, protocol, "Ingress"):
        return False
    return True


def from_sandbox_template(template: dict) -> dict:
    """The NetworkPolicy agent-sandbox makes from a SandboxTemplate's `networkPolicy`
    (networkPolicyManagement: Managed): it selects the template's pods."""
    spec = template["spec"]
    np = spec["networkPolicy"]
    labels = spec["podTemplate"]["metadata"]["labels"]
    types = ["Ingress"] + (["Egress"] if "egress" in np else [])
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{template['metadata']['name']}-managed",
                         "namespace": template["metadata"]["namespace"]},
            "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": types,
                     "ingress": np.get("ingress") or [], "egress": np.get("egress") or []}}
