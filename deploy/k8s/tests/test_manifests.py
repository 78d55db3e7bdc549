"""deploy/k8s/manifests: valid against Kubernetes' schemas and the vendored agent-sandbox
CRDs (offline), locked down, and consistent with each other and with the programs."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import yaml

from conftest import K8S_DIR
from validate_manifests import validate_files

MANIFESTS = sorted(glob.glob(os.path.join(K8S_DIR, "manifests", "*.yaml")))
VALIDATOR = os.path.join(K8S_DIR, "tests", "validate_manifests.py")


def _docs() -> list[dict]:
    docs = []
    for path in MANIFESTS:
        with open(path, encoding="utf-8") as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d)
    return docs


def _one(kind: str, name: str) -> dict:
    found = [d for d in _docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def _pod_specs() -> dict[str, dict]:
    specs = {}
    for d in _docs():
        if d["kind"] == "SandboxTemplate":
            specs[d["metadata"]["name"]] = d["spec"]["podTemplate"]["spec"]
        elif d["kind"] == "Deployment":
            specs[d["metadata"]["name"]] = d["spec"]["template"]["spec"]
    return specs


def _flag(args: list[str], flag: str) -> str:
    assert flag in args, (flag, args)
    return args[args.index(flag) + 1]


def test_every_manifest_is_valid():
    assert validate_files(MANIFESTS) == []
    kinds = sorted((d["apiVersion"], d["kind"]) for d in _docs())
    assert kinds == sorted([
        ("v1", "Namespace"),
        ("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate"),
        ("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool"),
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("v1", "Service"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
    ])
    assert all(d["metadata"].get("namespace") == "toolbox" for d in _docs()
               if d["kind"] != "Namespace")
    result = subprocess.run([sys.executable, VALIDATOR], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


BROKEN = {
    # agent-sandbox kinds, against the vendored CRDs
    "unknown container field": ("sandbox-template.yaml", "readOnlyRootFilesystem:",
                                "readOnlyRootFilesytem:"),
    "replicas not a number": ("warm-pool.yaml", "replicas: 3", "replicas: three"),
    "template ref misnamed": ("warm-pool.yaml", "sandboxTemplateRef:", "templateRef:"),
    "not a served version": ("warm-pool.yaml", "extensions.agents.x-k8s.io/v1beta1",
                             "extensions.agents.x-k8s.io/v2"),
    "deprecated version": ("warm-pool.yaml", "extensions.agents.x-k8s.io/v1beta1",
                           "extensions.agents.x-k8s.io/v1alpha1"),
    "bad enum": ("sandbox-template.yaml", "envVarsInjectionPolicy: Disallowed",
                 "envVarsInjectionPolicy: Sometimes"),
    # core kinds, against kubernetes-validate's schemas
    "unknown deployment field": ("router.yaml", "readOnlyRootFilesystem:",
                                 "readOnlyRootFilesytem:"),
    "service port a list": ("router.yaml", "port: 7900", "port: [7900]"),
    "role verbs a string": ("placement.yaml", "verbs: [get]", "verbs: get"),
    "policy field misnamed": ("router.yaml", "policyTypes: [Ingress, Egress]",
                              "policyType: [Ingress, Egress]"),
    "ipBlock not a CIDR": ("sandbox-template.yaml", "- 100.64.0.0/10", "- [100.64.0.0/10]"),
    "name not DNS": ("router.yaml", "name: toolbox-router\n", "name: Toolbox_Router\n"),
    "no kind": ("namespace.yaml", "kind: Namespace\n", ""),
}


def test_the_validator_fails_broken_manifests(tmp_path):
    for what, (file, old, new) in BROKEN.items():
        with open(os.path.join(K8S_DIR, "manifests", file), encoding="utf-8") as f:
            text = f.read()
        assert old in text, (what, old)
        broken = tmp_path / f"{what.replace(' ', '-')}.yaml"
        broken.write_text(text.replace(old, new, 1))
        assert validate_files([str(broken)]), f"the validator passed: {what}"
    # The script says so in its exit code.
    result = subprocess.run([sys.executable, VALIDATOR, str(tmp_path / "bad-enum.yaml")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "envVarsInjectionPolicy" in result.stdout


def test_every_pod_is_locked_down():
    specs = _pod_specs()
    assert sorted(specs) == ["toolbox-host", "toolbox-placement", "toolbox-router"]
    for name, spec in specs.items():
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] > 0, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec.get("hostNetwork") is not True and spec.get("hostPID") is not True
        # Only the adapter talks to the API server.
        assert spec["automountServiceAccountToken"] is (name == "toolbox-placement"), name
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert sc["capabilities"] == {"drop": ["ALL"]}, (name, c["name"])
            assert sc["runAsNonRoot"] is True, (name, c["name"])
            assert sc.get("privileged") is not True
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            limits, requests = c["resources"]["limits"], c["resources"]["requests"]
            assert "memory" in limits and "cpu" in requests and "memory" in requests
            # The image's ENTRYPOINT (tini) must stay PID 1.
            assert "command" not in c, (name, c["name"])
            for mount in c.get("volumeMounts", []):
                if "token" in mount["name"]:
                    assert mount["readOnly"] is True
    images = {c["image"] for s in specs.values() for c in s["containers"]}
    assert len(images) == 1, f"one image for every part: {images}"


def test_the_host_pod_runs_the_boot_program_toward_toolbox_serve():
    template = _one("SandboxTemplate", "toolbox-host")
    spec = template["spec"]
    assert spec["envVarsInjectionPolicy"] == "Disallowed", "claims must fit warm pods"
    containers = {c["name"]: c for c in spec["podTemplate"]["spec"]["containers"]}
    host, gate = containers["host"], containers["gate"]
    args = host["args"]
    assert args[0] == "toolbox-k8s-boot"
    assert "--epoch" not in args, "the boot program's default is --epoch next"
    assert _flag(args, "--state-store") == "$(TOOLBOX_STATE_STORE)"
    env = {e["name"]: e.get("value") for e in host["env"]}
    assert env["TOOLBOX_STATE_STORE"].startswith("s3://")
    assert "--wipe-workspace" in args
    # No file for the session server's token: it goes down a pipe (issue 37).
    assert "--run-dir" not in args and "--token-file" not in args
    listen_port = int(_flag(args, "--listen").rsplit(":", 1)[1])
    assert [p["containerPort"] for p in host["ports"]] == [listen_port]
    assert host["readinessProbe"]["tcpSocket"]["port"] == listen_port
    gate_port = int(_flag(gate["args"], "--listen").rsplit(":", 1)[1])
    assert [p["containerPort"] for p in gate["ports"]] == [gate_port]
    assert gate["readinessProbe"]["tcpSocket"]["port"] == gate_port
    # The network policy lets the router and the adapter reach the session server's port,
    # and the adapter alone the gate's.
    host_rule, gate_rule = spec["networkPolicy"]["ingress"]
    (peer,) = host_rule["from"]
    (expr,) = peer["podSelector"]["matchExpressions"]
    assert sorted(expr["values"]) == ["toolbox-placement", "toolbox-router"]
    assert host_rule["ports"] == [{"protocol": "TCP", "port": listen_port}]
    (peer,) = gate_rule["from"]
    assert peer == {"podSelector": {"matchLabels": {"app.kubernetes.io/name":
                                                    "toolbox-placement"}}}
    assert gate_rule["ports"] == [{"protocol": "TCP", "port": gate_port}]
    mounts = {m["mountPath"]: m["name"] for m in host["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["podTemplate"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts[_flag(args, "--workspace")]], "the workspace is scratch"


def test_the_pieces_name_each_other_consistently():
    template = _one("SandboxTemplate", "toolbox-host")
    pool = _one("SandboxWarmPool", "toolbox-hosts")
    assert pool["spec"]["sandboxTemplateRef"]["name"] == template["metadata"]["name"]
    host_args = template["spec"]["podTemplate"]["spec"]["containers"][0]["args"]
    host_port = _flag(host_args, "--listen").rsplit(":", 1)[1]

    adapter = _one("Deployment", "toolbox-placement")["spec"]["template"]["spec"]
    a_args = adapter["containers"][0]["args"]
    assert a_args[0] == "toolbox-k8s-adapter"
    assert _flag(a_args, "--warm-pool") == pool["metadata"]["name"]
    assert _flag(a_args, "--host-port") == host_port
    gate_args = next(c for c in template["spec"]["podTemplate"]["spec"]["containers"]
                     if c["name"] == "gate")["args"]
    assert _flag(a_args, "--assign-port") == _flag(gate_args, "--listen").rsplit(":", 1)[1]
    a_mounts = {m["mountPath"]: m["name"] for m in adapter["containers"][0]["volumeMounts"]}
    a_volumes = {v["name"]: v for v in adapter["volumes"]}
    for flag, secret in (("--pool-token-file", "toolbox-pool-token"),
                         ("--host-key-file", "toolbox-host-key"),
                         ("--token-file", "toolbox-placement-token")):
        folder = os.path.dirname(_flag(a_args, flag))
        assert a_volumes[a_mounts[folder]]["secret"]["secretName"] == secret, flag
    assert adapter["serviceAccountName"] == "toolbox-placement"

    svc = _one("Service", "toolbox-placement")
    router = _one("Deployment", "toolbox-router")["spec"]["template"]["spec"]
    r_args = router["containers"][0]["args"]
    assert r_args[:2] == ["toolbox", "router"]
    assert _flag(r_args, "--placement") == (
        f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:"
        f"{svc['spec']['ports'][0]['port']}")
    assert _flag(r_args, "--token-file") and _flag(r_args, "--placement-token-file")
    for name in ("toolbox-placement", "toolbox-router"):
        dep = _one("Deployment", name)
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert _one("Service", name)["spec"]["selector"].items() <= labels.items()

    binding = _one("RoleBinding", "toolbox-placement")
    assert binding["roleRef"]["name"] == "toolbox-placement"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "toolbox-placement",
                                    "namespace": "toolbox"}]


def test_the_adapter_may_do_only_what_it_does():
    role = _one("Role", "toolbox-placement")
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): sorted(r["verbs"])
             for r in role["rules"]}
    assert rules == {
        (("extensions.agents.x-k8s.io",), ("sandboxclaims",)):
            ["create", "delete", "get", "list", "patch"],
        (("agents.x-k8s.io",), ("sandboxes",)): ["get"],
        # The per-session records: a nonce and the parked epoch, nothing secret.
        (("",), ("configmaps",)): ["create", "get", "list", "patch"],
    }
    assert not [d for d in _docs() if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]


def test_the_adapter_can_read_no_secret():
    """Issue 37: the Role let the adapter get, list and patch every Secret of the namespace
    (the store's credentials, the router's and the pool's tokens). RBAC cannot narrow by
    label and the per-session names are not known in advance, so the adapter reads no
    Secret through the API at all: its own keys are mounted files."""
    role = _one("Role", "toolbox-placement")
    for rule in role["rules"]:
        assert "*" not in rule["apiGroups"] and "*" not in rule["resources"], rule
        assert "*" not in rule["verbs"], rule
        assert "secrets" not in rule["resources"], rule
        assert "watch" not in rule["verbs"] and "deletecollection" not in rule["verbs"], rule
    adapter = _one("Deployment", "toolbox-placement")["spec"]["template"]["spec"]
    mounted = {v["secret"]["secretName"] for v in adapter["volumes"] if "secret" in v}
    assert mounted == {"toolbox-placement-token", "toolbox-pool-token", "toolbox-host-key"}


def _secret_names_of(container: dict, volumes: dict) -> set[str]:
    """Every Secret a container can read: mounted (secret or projected volumes) or in its
    environment (envFrom, secretKeyRef)."""
    names = set()
    for mount in container.get("volumeMounts", []):
        vol = volumes[mount["name"]]
        if "secret" in vol:
            names.add(vol["secret"]["secretName"])
        for source in (vol.get("projected") or {}).get("sources", []):
            if "secret" in source:
                names.add(source["secret"]["name"])
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            names.add(source["secretRef"]["name"])
    for env in container.get("env", []):
        ref = (env.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            names.add(ref["name"])
    return names


def test_model_code_cannot_reach_the_pool_token():
    """Issue 37: the pool token was mounted in the `host` container, where model code runs
    after the boot program execs toolbox serve. With it, code in one session's pod could
    assign any waiting warm pod (to a session and a token of its choosing). An environment
    variable dropped at the exec would not do: PID 1 (tini) keeps the container's
    environment, and /proc/1/environ is readable by the same user. So the token lives in a
    second container of the pod, the gate (its own mount and PID namespaces, another user,
    no volume in common), which checks assignments and hands them to the boot program over
    an abstract socket; the gate outlives restarts of the `host` container."""
    spec = _one("SandboxTemplate", "toolbox-host")["spec"]["podTemplate"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    containers = {c["name"]: c for c in spec["containers"]}
    assert sorted(containers) == ["gate", "host"]
    assert spec.get("shareProcessNamespace") is not True, "the gate's processes must stay hidden"
    host, gate = containers["host"], containers["gate"]
    assert "toolbox-pool-token" not in _secret_names_of(host, volumes)
    assert "--pool-token-file" not in host["args"]
    assert _secret_names_of(gate, volumes) == {"toolbox-pool-token", "toolbox-store"}
    assert gate["args"][0] == "toolbox-k8s-gate"
    pool_dir = os.path.dirname(_flag(gate["args"], "--pool-token-file"))
    gate_mounts = {m["mountPath"]: m["name"] for m in gate["volumeMounts"]}
    assert volumes[gate_mounts[pool_dir]]["secret"]["secretName"] == "toolbox-pool-token"
    # The gate shares no volume with the `host` container: the hand-off is an abstract
    # socket (the pod's network namespace; no file model code could read or replace).
    host_mounts = {m["mountPath"]: m["name"] for m in host["volumeMounts"]}
    assert not set(gate_mounts.values()) & set(host_mounts.values())
    handoff = _flag(host["args"], "--handoff-socket")
    assert handoff.startswith("@") and handoff == _flag(gate["args"], "--handoff-socket")
    # The gate hands over only while a waiting boot program holds the session server's port.
    assert _flag(gate["args"], "--host-port") == _flag(host["args"], "--listen").rsplit(":", 1)[1]
    # Another user than model code's, so nothing of the gate is model code's to touch.
    assert gate["securityContext"]["runAsUser"] != spec["securityContext"]["runAsUser"]
    assert host["securityContext"].get("runAsUser", spec["securityContext"]["runAsUser"]) \
        == spec["securityContext"]["runAsUser"]


def test_no_secret_reaches_the_host_container():
    """The general rule behind the pool token's move: the `host` container, where model code
    runs, mounts and is given no Secret at all. The store's credentials were in its
    environment (envFrom toolbox-store), so PID 1 (tini) kept them in /proc/1/environ for
    model code to read: every session's state in the bucket. The gate passes them with the
    assignment, and the boot program puts them in toolbox serve's environment only, which
    toolbox takes out of its environment block at start and keeps non-dumpable."""
    spec = _one("SandboxTemplate", "toolbox-host")["spec"]["podTemplate"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for c in spec["containers"] + spec.get("initContainers", []):
        if c["name"] != "gate":
            assert _secret_names_of(c, volumes) == set(), c["name"]
    assert spec["automountServiceAccountToken"] is False
    gate = next(c for c in spec["containers"] if c["name"] == "gate")
    (store,) = [e for e in gate["envFrom"] if "secretRef" in e]
    assert store["secretRef"]["name"] == "toolbox-store"
    # The gate passes its AWS_* variables: the Secret's keys must be those.
    assert all(k.startswith("AWS_") for k in _store_keys_in_the_readme())


def _store_keys_in_the_readme() -> list[str]:
    """The keys README.md's set-up step puts in toolbox-store."""
    import re

    with open(os.path.join(K8S_DIR, "README.md"), encoding="utf-8") as f:
        text = f.read()
    step = text[text.index("create secret generic toolbox-store"):]
    step = step[:step.index("```")]
    keys = re.findall(r"--from-literal=([A-Z_]+)=", step)
    assert keys, "the README's toolbox-store step names no keys"
    return keys
