"""A small Dockerfile reader for the image tests: instructions per stage, ARG defaults, and the
substitution of ``${VAR}`` the way the builder does it for FROM, LABEL and ENV.

Why it exists: no Docker engine runs here, so the tests read the Dockerfiles the way BuildKit would
(line continuations, comments, global ARGs before the first FROM, per-stage ARG scope) and check
what they would build.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Instruction:
    cmd: str  # upper case, e.g. RUN
    args: str  # the rest of the logical line, continuations joined
    line: int  # first physical line (1-based)

    def exec_form(self) -> list[str] | None:
        """The JSON (exec) form of CMD/ENTRYPOINT/RUN/HEALTHCHECK CMD, or None for shell form."""
        text = self.args
        if self.cmd == "HEALTHCHECK":
            text = text.split(" CMD ", 1)[1] if " CMD " in text else text
        text = text.strip()
        if text.startswith("["):
            value = json.loads(text)
            assert isinstance(value, list)
            return [str(v) for v in value]
        return None


@dataclass
class Stage:
    base: str  # the FROM image expression, unexpanded
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, cmd: str) -> list[Instruction]:
        return [i for i in self.instructions if i.cmd == cmd]

    def arg_defaults(self) -> dict[str, str | None]:
        return parse_args(self.all("ARG"))


@dataclass
class Dockerfile:
    global_args: dict[str, str | None]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def every_arg(self) -> set[str]:
        """Every ARG name declared, global or in a stage, with or without a default."""
        names = set(self.global_args)
        for stage in self.stages:
            names |= set(stage.arg_defaults())
        return names

    def every_arg_default(self) -> dict[str, str]:
        """Every ARG with a default, global or per stage (one name, one default)."""
        found: dict[str, str] = {}
        for args in [self.global_args, *(s.arg_defaults() for s in self.stages)]:
            for key, value in args.items():
                if value is None:
                    continue
                assert found.get(key, value) == value, f"ARG {key} has two defaults"
                found[key] = value
        return found


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continuation lines and drop comments (not the `# syntax=` directive's meaning)."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        out.append((start, " ".join(part for part in buf if part)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


def parse_args(instructions: list[Instruction]) -> dict[str, str | None]:
    args: dict[str, str | None] = {}
    for inst in instructions:
        name, sep, default = inst.args.partition("=")
        args[name.strip()] = default.strip().strip('"') if sep else None
    return args


def parse(path: Path) -> Dockerfile:
    global_args: list[Instruction] = []
    stages: list[Stage] = []
    for line, text in logical_lines(path.read_text()):
        cmd, _, rest = text.partition(" ")
        inst = Instruction(cmd.upper(), rest.strip(), line)
        if inst.cmd == "FROM":
            parts = inst.args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name))
        elif not stages:
            assert inst.cmd == "ARG", f"{path}:{line}: {inst.cmd} before the first FROM"
            global_args.append(inst)
        else:
            stages[-1].instructions.append(inst)
    return Dockerfile(parse_args(global_args), stages)


def expand(text: str, values: dict[str, str]) -> str:
    """Substitute ${VAR}, ${VAR:-word} (word when VAR is empty) and $VAR; an unknown name is an
    error (the build would get '')."""

    def repl(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name not in values:
            raise KeyError(f"{name} is not defined for {text!r}")
        fallback = match.group(2)
        if fallback is not None and not values[name]:
            return fallback
        return values[name]

    return _VAR.sub(repl, text)


def key_values(args: str) -> dict[str, str]:
    """LABEL/ENV key=value pairs (shell-quoted values)."""
    pairs: dict[str, str] = {}
    for token in shlex.split(args):
        key, sep, value = token.partition("=")
        assert sep, f"not key=value: {token!r}"
        pairs[key] = value
    return pairs
