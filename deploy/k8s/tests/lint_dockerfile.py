"""Checks of deploy/k8s/Dockerfile that need no Docker daemon (none runs here): its stages,
its user, PID 1, and what the runtime stage carries."""

from __future__ import annotations

import json
import re
import shlex


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continued lines joined."""
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    if current:
        out.append(("UNTERMINATED", current))
    return out


def stages(text: str) -> list[dict]:
    """Each stage: its base image, name and instructions."""
    found = []
    for word, args in instructions(text):
        if word == "FROM":
            parts = args.split()
            parts = [p for p in parts if not p.startswith("--platform")]
            name = parts[2] if len(parts) >= 3 and parts[1].lower() == "as" else None
            found.append({"image": parts[0], "name": name, "body": []})
        elif word == "UNTERMINATED":
            raise ValueError(f"an instruction never ends: {args[:80]!r}")
        elif found:
            found[-1]["body"].append((word, args))
    return found


def lint(text: str, ipykernel_pin: str | None = None) -> list[str]:
    """Everything wrong with the Dockerfile, as sentences; [] when it passes."""
    errors = []
    try:
        all_stages = stages(text)
    except ValueError as e:
        return [str(e)]
    if len(all_stages) < 2:
        return ["it must be multi-stage: a build stage and a runtime stage"]
    names = [s["name"] for s in all_stages]
    if "build" not in names:
        errors.append("no stage named build")
    final = all_stages[-1]
    if final["name"] != "runtime":
        errors.append("the last stage must be named runtime")
    if re.match(r"(.*/)?rust:", final["image"]):
        errors.append("the runtime stage must not be the rust image")
    build = next((s for s in all_stages if s["name"] == "build"), None)
    if build and not any(w == "RUN" and "cargo build" in a and "--release" in a
                         for w, a in build["body"]):
        errors.append("the build stage does not run cargo build --release")

    body = final["body"]
    users = [a for w, a in body if w == "USER"]
    if not users:
        errors.append("the runtime stage sets no USER (it would run as root)")
    else:
        user = users[-1].split(":")[0]
        if user in ("root", "0") or (user.isdigit() and int(user) == 0):
            errors.append(f"USER {users[-1]} is root")
    entry = [a for w, a in body if w == "ENTRYPOINT"]
    if not entry:
        errors.append("no ENTRYPOINT")
    else:
        try:
            argv = json.loads(entry[-1])
        except ValueError:
            argv = None
        if not isinstance(argv, list):
            errors.append("ENTRYPOINT must be the exec form (a JSON list)")
        elif not argv or not re.search(r"(^|/)tini$", argv[0]) or argv[1:2] != ["--"]:
            errors.append(f"ENTRYPOINT must be tini -- (PID 1 reaps and forwards signals), "
                          f"not {argv}")
    copies = [a for w, a in body if w == "COPY"]
    if not any("--from=build" in c and c.split()[-1].endswith("/toolbox") for c in copies):
        errors.append("the runtime stage does not copy the toolbox binary from build")
    runs = " ".join(a for w, a in body if w == "RUN")
    for package in ("tini", "python3"):
        if not re.search(rf"apt-get install[^&]*\b{package}\b", runs):
            errors.append(f"the runtime stage does not install {package}")
    args = dict(a.split("=", 1) for w, a in body if w == "ARG" and "=" in a)
    if "ipykernel" not in runs:
        errors.append("the runtime stage does not install ipykernel")
    elif ipykernel_pin and args.get("IPYKERNEL_VERSION") != ipykernel_pin:
        errors.append(f"ipykernel {args.get('IPYKERNEL_VERSION')} differs from the tests' pin "
                      f"{ipykernel_pin}")
    for w, a in body:
        if w in ("CMD", "ENTRYPOINT", "RUN") and re.search(r"--token(\s|=|\"|$)", a):
            errors.append(f"{w} passes a token on the command line: use --token-file")
    cmd = [a for w, a in body if w == "CMD"]
    if cmd:
        try:
            json.loads(cmd[-1])
        except ValueError:
            errors.append("CMD must be the exec form (a JSON list)")
    for w, a in body:
        if w == "ADD" and re.match(r"https?://", shlex.split(a)[0] if a else ""):
            errors.append("ADD of a URL: fetch in a RUN with a checksum instead")
    return errors
