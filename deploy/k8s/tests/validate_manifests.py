#!/usr/bin/env python3
"""Validates Kubernetes manifests offline.

- Core kinds (Deployment, Service, Role, ...) against the Kubernetes OpenAPI schemas that
  the `kubernetes-validate` package bundles, strictly (an unknown field is an error), for
  one pinned Kubernetes version.
- agent-sandbox kinds (Sandbox, SandboxTemplate, SandboxWarmPool, SandboxClaim) against the
  openAPIV3Schema of the CRDs vendored in deploy/k8s/vendor/agent-sandbox/<version>/, made
  strict the same way (kubectl's default server-side field validation rejects unknown
  fields too), with `jsonschema`.

Usage: validate_manifests.py [--kubernetes-version 1.35.0] [FILE ...]
(default: every deploy/k8s/manifests/*.yaml). Exit 0 when every document passed, 1 when any
failed (each failure printed), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import copy
import functools
import glob
import os
import re
import sys

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
K8S_DIR = os.path.dirname(HERE)
VENDOR = os.path.join(K8S_DIR, "vendor", "agent-sandbox")
KUBERNETES_VERSION = "1.35.0"
SANDBOX_GROUPS = ("agents.x-k8s.io", "extensions.agents.x-k8s.io")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def vendored_crd_dir() -> str:
    """The one vendored agent-sandbox version folder."""
    found = sorted(d for d in glob.glob(os.path.join(VENDOR, "*")) if os.path.isdir(d))
    if len(found) != 1:
        raise RuntimeError(f"expected one vendored agent-sandbox version in {VENDOR}, "
                           f"found {found}")
    return found[0]


def _strict(schema: dict) -> dict:
    """The schema with unknown properties refused wherever the CRD lists the properties."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


@functools.lru_cache(maxsize=None)
def crd_schemas() -> dict:
    """{(apiVersion, kind): (strict openAPIV3Schema, deprecated)} of every served version."""
    out = {}
    for path in sorted(glob.glob(os.path.join(vendored_crd_dir(), "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            crd = yaml.safe_load(f)
        if crd.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = _strict(version["schema"]["openAPIV3Schema"])
                out[(f"{group}/{version['name']}", kind)] = (schema,
                                                            bool(version.get("deprecated")))
    return out


def validate_sandbox_kind(doc: dict) -> list[str]:
    """Errors of one agent-sandbox document against the vendored CRDs."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    found = crd_schemas().get(key)
    if found is None:
        known = ", ".join(sorted(f"{k} {v}" for v, k in crd_schemas()))
        return [f"{key[1]} {key[0]} is not a kind the vendored CRDs serve ({known})"]
    schema, deprecated = found
    errors = []
    if deprecated:
        errors.append(f"{key[0]} {key[1]} is deprecated in the vendored CRDs")
    validator = jsonschema.Draft7Validator(schema)
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in e.absolute_path) or "(document)"
        errors.append(f"{where}: {e.message}")
    return errors


def validate_core_kind(doc: dict, version: str) -> list[str]:
    """Errors of one core-kind document against kubernetes-validate's bundled schemas."""
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except ValidationError as e:
        where = ".".join(str(p) for p in e.path) or "(document)"
        return [f"{where}: {e.message}"]
    except SchemaNotFoundError as e:
        return [f"no schema for {doc.get('kind')} {doc.get('apiVersion')} in Kubernetes "
                f"{version}: {e}"]
    return []


def validate_document(doc, version: str = KUBERNETES_VERSION) -> list[str]:
    if not isinstance(doc, dict):
        return ["a document must be a mapping"]
    for field in ("apiVersion", "kind"):
        if not isinstance(doc.get(field), str) or not doc[field]:
            return [f"{field} is missing"]
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        return [f"metadata.name {name!r} is not a DNS-1123 subdomain"]
    group = str(doc.get("apiVersion", "")).partition("/")[0]
    if group in SANDBOX_GROUPS:
        return validate_sandbox_kind(doc)
    return validate_core_kind(doc, version)


def validate_files(paths: list[str], version: str = KUBERNETES_VERSION) -> list[str]:
    """Every failure of every document of `paths`, as `file[doc] Kind/name: error` lines."""
    failures = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                docs = [d for d in yaml.safe_load_all(f) if d is not None]
        except (OSError, yaml.YAMLError) as e:
            failures.append(f"{path}: cannot read: {e}")
            continue
        if not docs:
            failures.append(f"{path}: no documents")
        for i, doc in enumerate(docs):
            label = f"{path}[{i}]"
            if isinstance(doc, dict):
                label += f" {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
            failures.extend(f"{label}: {err}" for err in validate_document(doc, version))
    return failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kubernetes-version", default=KUBERNETES_VERSION)
    p.add_argument("files", nargs="*")
    a = p.parse_args(argv)
    files = a.files or sorted(glob.glob(os.path.join(K8S_DIR, "manifests", "*.yaml")))
    if not files:
        print("no manifests to validate", file=sys.stderr)
        return 2
    failures = validate_files(files, a.kubernetes_version)
    for line in failures:
        print(line)
    print(f"{len(files)} file(s), {len(failures)} failure(s) "
          f"(Kubernetes {a.kubernetes_version}, agent-sandbox "
          f"{os.path.basename(vendored_crd_dir())})", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
