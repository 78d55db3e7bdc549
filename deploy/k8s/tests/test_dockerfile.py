"""deploy/k8s/Dockerfile, linted without Docker (no daemon runs here)."""

from __future__ import annotations

import os
import re

from conftest import K8S_DIR
from lint_dockerfile import instructions, lint

ROOT = os.path.dirname(os.path.dirname(K8S_DIR))
DOCKERFILE = os.path.join(K8S_DIR, "Dockerfile")


def _ipykernel_pin() -> str:
    with open(os.path.join(ROOT, "tests", "requirements.txt"), encoding="utf-8") as f:
        return re.search(r"^ipykernel==(\S+)", f.read(), re.M).group(1)


def test_the_dockerfile_passes_the_lint():
    with open(DOCKERFILE, encoding="utf-8") as f:
        text = f.read()
    assert lint(text, _ipykernel_pin()) == []


def test_what_the_dockerfile_copies_exists():
    with open(DOCKERFILE, encoding="utf-8") as f:
        text = f.read()
    sources = [a.split()[-2] for w, a in instructions(text)
               if w == "COPY" and "--from" not in a and a.split()[-2] != "."]
    assert sources, "the runtime stage copies the adapter and boot programs"
    for src in sources:
        path = os.path.join(ROOT, src)
        assert os.path.isfile(path), src
        assert os.access(path, os.X_OK), f"{src} should be executable"


BROKEN = ["single stage", "root user", "no tini", "shell-form entrypoint",
          "token on the command line", "rust runtime"]


def _variant(kind: str) -> str:
    with open(DOCKERFILE, encoding="utf-8") as f:
        text = f.read()
    if kind == "single stage":
        return 'FROM debian:bookworm-slim\nUSER 1000\nENTRYPOINT ["/usr/bin/tini", "--"]\n'
    if kind == "root user":
        return text.replace("USER 10001:10001", "USER root")
    if kind == "no tini":
        return text.replace('ENTRYPOINT ["/usr/bin/tini", "--"]', 'ENTRYPOINT ["toolbox"]')
    if kind == "shell-form entrypoint":
        return text.replace('ENTRYPOINT ["/usr/bin/tini", "--"]', "ENTRYPOINT tini -- toolbox")
    if kind == "token on the command line":
        return text.replace('"--token-file", "/run/toolbox/token"', '"--token", "secret"')
    if kind == "rust runtime":
        return text.replace("FROM debian:${DEBIAN_RELEASE}-slim AS runtime",
                            "FROM rust:${RUST_VERSION} AS runtime")
    raise AssertionError(kind)


def test_the_lint_fails_broken_dockerfiles():
    for kind in BROKEN:
        broken = _variant(kind)
        with open(DOCKERFILE, encoding="utf-8") as f:
            assert broken != f.read(), f"{kind}: the variant did not change anything"
        assert lint(broken, _ipykernel_pin()), f"the lint passed a Dockerfile with {kind}"
    with open(DOCKERFILE, encoding="utf-8") as f:
        text = f.read()
    assert lint(text, "0.0.1"), "a different ipykernel pin must fail"


def test_every_program_the_manifests_start_is_in_the_image():
    """Each container's first argument (tini runs it from PATH) is a program the runtime
    stage installs: the gate's container would otherwise never start."""
    import glob

    import yaml

    with open(DOCKERFILE, encoding="utf-8") as f:
        text = f.read()
    installed = {"toolbox"}  # copied from the build stage (the lint checks it)
    for word, args in instructions(text):
        if word == "COPY" and "--from" not in args:
            dest = args.split()[-1]
            if dest.startswith("/usr/local/bin/"):
                installed.add(os.path.basename(dest))
    started = set()
    for path in glob.glob(os.path.join(K8S_DIR, "manifests", "*.yaml")):
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                spec = (doc.get("spec") or {})
                pod = (spec.get("template") or spec.get("podTemplate") or {}).get("spec")
                for c in (pod or {}).get("containers", []):
                    started.add(c["args"][0])
    assert started == {"toolbox", "toolbox-k8s-boot", "toolbox-k8s-gate",
                       "toolbox-k8s-adapter"}, started
    assert started <= installed, f"not in the image: {sorted(started - installed)}"
