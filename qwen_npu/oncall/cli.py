"""``qwen-npu oncall <switch>``: status, mtp-off, mtp-on, patch-off, patch-on, rollback, engine.

Why: at 3 a.m. a switch must be one command that shows each step ready to paste (``+ helm ...``),
waits for the engine's readiness (the sidecar's /readyz, asked in its container: no curl) and stops
at the first failure with the next step. Under ``--via make`` the messages name make targets.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from qwen_npu.cli_parser import OneLineParser, error_line, port
from qwen_npu.patches.registry import PATCHES
from qwen_npu.ports import ENGINE_PORT, SIDECAR_PORT

PROG = "qwen-npu oncall"
SWITCHES = ("status", "mtp-off", "mtp-on", "patch-off", "patch-on", "rollback", "engine")


class Stop(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def _command(value: str) -> list[str]:
    """A command with its flags, split as a shell would (`--helm "helm --kube-context a"`)."""
    try:
        argv = shlex.split(value)
    except ValueError as exc:  # an unbalanced quote
        raise argparse.ArgumentTypeError(f"{value!r}: {exc}; quote it as a shell would") from None
    if not argv:
        raise argparse.ArgumentTypeError("empty; name the command (a path or one on PATH)")
    return argv


def http_probe(url: str, label: str) -> str:
    """Python for ``python3 -c``: print ``<label> <code> <body>`` of GET ``url``; exit 0 on 200."""
    return (
        "import sys, urllib.request as u; "
        f"sys.excepthook = lambda t, v, b: print({label!r}, 0, v); "
        "H = type('H', (u.HTTPErrorProcessor,), {'http_response': lambda s, q, r: r}); "
        f"r = u.build_opener(H).open({url!r}, timeout=10); c = r.status; "
        f"print({label!r}, c, r.read().decode()); sys.exit(c != 200)"
    )


def router_workers_probe(url: str) -> str:
    """Python for the router: a line per worker of GET /workers; exit 0 if all are healthy."""
    return (
        "import json, sys, urllib.request as u; "
        f"U = {url!r}; sys.excepthook = lambda t, v, b: print(U, v); "
        "w = json.load(u.urlopen(U, timeout=10)).get('workers', []); "
        "[print('router worker', x.get('url'), 'healthy=' + str(x.get('is_healthy')).lower(), "
        "'load=' + str(x.get('load'))) for x in w]; "
        "bad = [x for x in w if not x.get('is_healthy')]; "
        "print('router workers:', len(w), 'healthy:', len(w) - len(bad)); "
        "sys.exit(1 if bad or not w else 0)"
    )


# The engine's name depends on the chart's overrides: read it from the release's own manifest
# rather than copy the chart's naming rule; selectors use only labels every engine pod carries.
ENGINE_KINDS = ("Deployment", "LeaderWorkerSet")


@dataclass(frozen=True)
class Workload:
    kind: str
    name: str

    @property
    def ref(self) -> str:
        return f"{self.kind.lower()}/{self.name}"  # deployment/<name>, what kubectl takes


def engine_workload(manifest: str) -> Workload | None:
    """The engine's Deployment or LeaderWorkerSet (component ``engine``); None if not one."""
    engines = []
    for doc in re.split(r"^---\s*$", manifest, flags=re.M):
        kind = re.search(r"^kind:\s*(\S+)\s*$", doc, flags=re.M)
        meta = re.search(r"^metadata:\s*\n((?:[ \t]+.*\n?|\s*\n)*)", doc, flags=re.M)
        if kind is None or meta is None or kind[1] not in ENGINE_KINDS:
            continue
        block = meta.group(1)
        name = re.search(r"^  name:\s*['\"]?([^'\"\s]+)", block, flags=re.M)
        engine = re.search(
            r"^    app\.kubernetes\.io/component:\s*['\"]?engine(['\"\s]|$)", block, re.M
        )
        if name is not None and engine is not None:
            engines.append(Workload(kind[1], name[1]))
    return engines[0] if len(engines) == 1 else None


def engine_selector(release: str) -> str:
    """Every engine pod of the release (LeaderWorkerSet workers included)."""
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/component=engine"


def serving_selector(release: str) -> str:
    """The pods that serve the API: every engine pod, or the LeaderWorkerSet leaders."""
    return engine_selector(release) + ",qwen-npu.io/role=leader"


def router_selector(release: str) -> str:
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/component=router"


@dataclass
class OnCall:
    switch: str
    release: str
    namespace: str
    chart: str
    helm: list[str]
    kubectl: list[str]
    timeout: str
    values_mode: str
    sidecar_port: int
    router_port: int
    via: str
    patch_name: str
    revision: str

    # make targets and variables under make, the CLI's verbs and flags otherwise
    @property
    def via_make(self) -> bool:
        return self.via == "make"

    @property
    def prog(self) -> str:
        return f"make {self.switch}" if self.via_make else f"{PROG} {self.switch}"

    def cmd(self, switch: str) -> str:
        return f"make {switch}" if self.via_make else f"{PROG} {switch}"

    def var(self, make_name: str, flag: str) -> str:
        return make_name if self.via_make else flag

    def say(self, text: str) -> None:
        print(f"{self.switch}: {text}", flush=True)

    @property
    def kns(self) -> list[str]:
        return [*self.kubectl, "--namespace", self.namespace]

    def need_tools(self) -> None:
        """helm and kubectl first, so a machine without them gets one line, not a half switch."""
        for tool, words in (("helm", self.helm), ("kubectl", self.kubectl)):
            if not words or shutil.which(words[0]) is None:
                var = self.var(tool.upper(), f"--{tool}")
                raise Stop(
                    f"{self.prog}: {var}={' '.join(words)} is not found or not executable; "
                    f"install {tool} or set {var}=/path/to/{tool} (docs/runbook.md)",
                    127,
                )

    def run(self, argv: list[str], fail: str) -> None:
        """Print ``+ argv`` and run it; ``fail`` is the message when it fails."""
        print("+ " + shlex.join(argv), flush=True)
        if subprocess.run(argv).returncode != 0:
            raise Stop(f"{self.switch}: {fail}")

    def read(self, argv: list[str]) -> str | None:
        """A read-only command's stdout, or None when it fails (its stderr shown)."""
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
        return done.stdout if done.returncode == 0 else None

    def sidecar_probe(self, pod: str, path: str) -> list[str]:
        code = http_probe(f"http://127.0.0.1:{self.sidecar_port}{path}", path)
        return [*self.kns, "exec", pod, "-c", "sidecar", "--", "python3", "-c", code]

    def first_pod(self, selector: str) -> str:
        out = self.read(
            [*self.kns, "get", "pod", "--selector", selector, "-o",
             "jsonpath={.items[0].metadata.name}"]
        )  # fmt: skip
        return (out or "").strip()

    def upgrade(self, *set_args: str) -> None:
        if not self.chart:
            var = self.var("CHART", "--chart")
            raise Stop(
                f"{self.prog}: set {var} to the chart of the deployed revision (a folder, a .tgz "
                "or oci://...; a relative path is read from the current folder)",
                2,
            )
        self.run(
            [*self.helm, "upgrade", self.release, self.chart, "--namespace", self.namespace,
             self.values_mode, *set_args],
            f"helm upgrade failed (its error is above); next: {self.cmd('status')}",
        )  # fmt: skip

    def history(self) -> None:
        release, ns = self.var("RELEASE=", "--release"), self.var("NAMESPACE=", "--namespace")
        self.run(
            [*self.helm, "history", self.release, "--namespace", self.namespace, "--max", "10"],
            f"helm cannot read release {self.release} in {self.namespace} (its error is above); "
            f"next: check {release}, {ns} and kubectl config current-context",
        )

    def engine(self) -> Workload:
        manifest = self.read(
            [*self.helm, "get", "manifest", self.release, "--namespace", self.namespace]
        )
        if manifest is None:
            raise Stop(
                f"{self.switch}: helm get manifest {self.release} failed (its error is above); "
                f"next: {self.cmd('status')}"
            )
        found = engine_workload(manifest)
        if found is None:
            raise Stop(
                f"{self.switch}: the manifest of release {self.release} has no engine Deployment "
                f"or LeaderWorkerSet; next: {self.cmd('status')}"
            )
        return found

    def wait(self) -> None:
        """Rollout, pod readiness, the sidecar's /readyz; the next step when one does not come."""
        engine_sel = engine_selector(self.release)
        serving = serving_selector(self.release)
        status = self.cmd("status")
        workload = self.engine()
        if workload.kind == "Deployment":
            # `kubectl rollout status` knows Deployments only: a LeaderWorkerSet waits on its pods.
            self.run(
                [*self.kns, "rollout", "status", workload.ref, f"--timeout={self.timeout}"],
                f"the rollout did not finish; next: {status}, then "
                f"{shlex.join(self.kns)} describe pod --selector {engine_sel}",
            )
        self.run(
            [*self.kns, "wait", "--for=condition=Ready", "pod", "--selector", serving,
             f"--timeout={self.timeout}"],
            f"engine pods not Ready; next: {status}, then "
            f"{shlex.join(self.kns)} logs --selector {engine_sel} -c engine --tail 100",
        )  # fmt: skip
        pod = self.first_pod(serving)
        if not pod:
            raise Stop(f"{self.switch}: no serving engine pod found; next: {status}")
        self.run(
            self.sidecar_probe(pod, "/readyz"),
            f"the sidecar's /readyz says not ready; next: {status} (its /status says why)",
        )
        self.say(
            f"done, release {self.release} in {self.namespace} is ready ({status} for details)"
        )

    def disabled_after(self, op: str, patch: str) -> list[str]:
        """The release's patches.disabled with ``patch`` added (``add``) or removed."""
        cannot = (
            f"{self.switch}: cannot read the release's values (helm get values {self.release} "
            f"--namespace {self.namespace}); next: {self.cmd('status')}"
        )
        out = self.read(
            [*self.helm, "get", "values", self.release, "--namespace", self.namespace,
             "--output", "json"]
        )  # fmt: skip
        if out is None:
            raise Stop(cannot)
        try:
            values = json.loads(out) or {}
        except ValueError as exc:
            print(f"helm get values did not print JSON: {exc}", file=sys.stderr)
            raise Stop(cannot) from None
        current = list((values.get("patches") or {}).get("disabled") or [])
        if op == "add":
            return current if patch in current else [*current, patch]
        return [p for p in current if p != patch]

    def mtp(self, enabled: bool) -> None:
        self.need_tools()
        self.upgrade("--set", f"mtp.enabled={'true' if enabled else 'false'}")
        self.wait()

    def patch(self, op: str, name: str) -> None:
        names = [p.name for p in PATCHES]
        var = self.var("PATCH", "--patch")
        if not name:
            raise Stop(f"{self.prog}: set {var}=<name>, one of: {' '.join(names)}", 2)
        if name not in names:
            raise Stop(
                f"{self.prog}: unknown patch '{name}'; {var} must be one of: {' '.join(names)} "
                "(qwen_npu/patches/registry.py)",
                2,
            )
        self.need_tools()
        disabled = self.disabled_after(op, name)
        self.upgrade(
            "--set-json", "patches.disabled=" + json.dumps(disabled, separators=(",", ":"))
        )
        self.wait()

    def rollback(self, revision: str) -> None:
        if revision and not revision.isdigit():
            var = self.var("REVISION", "--revision")
            raise Stop(
                f"{self.prog}: {var}={revision} is not a revision number; "
                f"see the REVISION column of: {self.cmd('status')}",
                2,
            )
        self.need_tools()
        self.history()
        self.run(
            [*self.helm, "rollback", self.release, *([revision] if revision else []),
             "--namespace", self.namespace],
            f"helm rollback failed (its error is above); next: {self.cmd('status')}",
        )  # fmt: skip
        self.wait()

    def status(self) -> None:
        """History, user values, pods, the sidecar's /status, the router's view of its workers."""
        self.need_tools()
        ns = self.namespace
        self.history()
        self.run(
            [*self.helm, "get", "values", self.release, "--namespace", ns],
            f"helm get values failed (its error is above); next: helm get values {self.release} "
            f"--namespace {ns} --all",
        )
        self.run(
            [*self.kns, "get", "pods", "--selector", f"app.kubernetes.io/instance={self.release}",
             "--output", "wide"],
            f"kubectl cannot list pods in {ns} (its error is above); next: kubectl auth can-i "
            f"list pods --namespace {ns}",
        )  # fmt: skip
        pod = self.first_pod(serving_selector(self.release))
        if not pod:
            raise Stop(
                f"{self.switch}: no serving engine pod of release {self.release} in {ns}; next: "
                f"kubectl --namespace {ns} get events --sort-by=.lastTimestamp"
            )
        self.run(
            self.sidecar_probe(pod, "/status"),
            f"the sidecar of {pod} did not answer /status (its error is above); next: "
            f"kubectl --namespace {ns} logs {pod} -c sidecar --tail=50",
        )  # fmt: skip
        router = self.first_pod(router_selector(self.release))
        if not router:
            self.say(
                f"no router pod in release {self.release} (router.enabled=false): clients reach "
                "the engine Service directly"
            )
            return
        self.run(
            [*self.kns, "exec", router, "-c", "router", "--", "python3", "-c",
             router_workers_probe(f"http://127.0.0.1:{self.router_port}/workers")],
            f"the router {router} lists no worker or an unhealthy one (above); next: "
            "docs/runbook.md#qwennpurouterworkerejected",
        )  # fmt: skip


def _matching(pattern: str, longest: int, what: str) -> Callable[[str], str]:
    """An argparse ``type=`` refusing text that does not match ``pattern``, or is too long."""

    def check(text: str) -> str:
        if len(text) > longest or not re.fullmatch(pattern, text):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return text

    return check


_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#: Helm's rule for a release: a DNS-1123 subdomain of at most 53 characters.
release_name = _matching(
    rf"{_LABEL}(\.{_LABEL})*",
    53,
    "a Helm release name (lower-case letters, digits, '-' and '.', at most 53 characters)",
)
namespace_name = _matching(
    _LABEL, 63, "a Kubernetes namespace (lower-case letters, digits and '-')"
)
#: A positive Go duration as helm and kubectl take it (--timeout).
duration = _matching(
    r"(?=.*[1-9])([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+",
    64,
    "a positive duration such as 35m, 1h30m or 90s",
)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("switch", choices=SWITCHES)
    p.add_argument("--release", type=release_name, default="qwen-npu")
    p.add_argument("--namespace", type=namespace_name, default="default")
    p.add_argument(
        "--chart",
        default="",
        help="the chart of the deployed revision (a folder, a .tgz or oci://...); required by "
        "the switches that upgrade (make passes this checkout's chart folder, by absolute path)",
    )
    for tool in ("helm", "kubectl"):
        p.add_argument(f"--{tool}", type=_command, default=tool, help="may carry flags")
    p.add_argument("--timeout", type=duration, default="35m", help="rollout and readiness wait")
    p.add_argument(
        "--values-mode",
        default="--reuse-values",
        help="helm upgrade's values flag (--reset-then-reuse-values with a newer chart)",
    )
    p.add_argument("--sidecar-port", type=port, default=SIDECAR_PORT)
    p.add_argument("--router-port", type=port, default=ENGINE_PORT)
    p.add_argument("--patch", dest="patch_name", default="", help="patch-off/patch-on: its name")
    p.add_argument("--revision", default="", help="rollback: the revision (default: previous)")
    p.add_argument("--via", choices=["cli", "make"], default="cli", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    oc = OnCall(**vars(args))
    try:
        if args.switch == "status":
            oc.status()
        elif args.switch == "engine":
            oc.need_tools()
            print(oc.engine().ref)
        elif args.switch in ("mtp-off", "mtp-on"):
            oc.mtp(args.switch == "mtp-on")
        elif args.switch in ("patch-off", "patch-on"):
            oc.patch("add" if args.switch == "patch-off" else "remove", oc.patch_name)
        else:
            oc.rollback(args.revision)
    except Stop as stop:  # on stderr in the verbs' one shape, unless make's names are in it
        said = stop.message.removeprefix(f"{PROG} ")
        print(stop.message if oc.via_make else error_line(PROG, said), file=sys.stderr, flush=True)
        return stop.code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
