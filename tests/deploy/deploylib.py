"""Helpers for the deploy.* checks (tests/deploy/deploy_checks.py).

What the deployment files say is compared with what the server really does: its flags and
defaults come from server/core/server_config.{h,cc} and `abcd-server --help`, its metrics from
the /metrics of a real abcd-server started here, and the image layout from emulating the
Dockerfile's final stage over a real build.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import yaml

SKIP = 77  # ctest SKIP_RETURN_CODE

# Labels Prometheus adds to every scraped series (static/DNS discovery and the operator's
# PodMonitor relabelling).
TARGET_LABELS = {"instance", "job", "namespace", "pod", "container", "endpoint", "service"}


class Check:
    """Collects expectations; prints every failure and a closing count."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failures = []

    def expect(self, condition, message):
        if condition:
            self.passed += 1
        else:
            self.failures.append(message)
        return bool(condition)

    def equal(self, actual, expected, what):
        return self.expect(actual == expected, f"{what}: got {actual!r}, want {expected!r}")

    def note(self, message):
        print(f"  {message}")

    def finish(self):
        for f in self.failures:
            print(f"FAIL: {f}")
        print(f"{self.name}: {self.passed} passed, {len(self.failures)} failed")
        return 1 if self.failures else 0


class Context:
    def __init__(self, source_dir, build_dir):
        self.source = os.path.abspath(source_dir)
        self.build = os.path.abspath(build_dir)
        self._flags = None
        self._defaults = None

    def path(self, *parts):
        return os.path.join(self.source, *parts)

    def binary(self, name):
        return os.path.join(self.build, "server", name)

    @property
    def plugin(self):
        return os.path.join(self.build, "bin", "libabcd_sentencepiece.so")

    # ---- the server's real interface ----------------------------------------------------------

    def server_flags(self):
        """The valued flags abcd-server accepts (kValued in server_config.cc)."""
        if self._flags is None:
            text = read(self.path("server/core/server_config.cc"))
            match = re.search(r"kValued\s*=\s*\{(.*?)\};", text, re.S)
            if not match:
                raise AssertionError("server_config.cc: kValued not found")
            self._flags = re.findall(r'"([a-z_]+)"', match.group(1))
        return self._flags

    def server_defaults(self):
        """ServerConfig's member defaults (server_config.h), numbers evaluated."""
        if self._defaults is None:
            text = read(self.path("server/core/server_config.h"))
            body = re.search(r"struct ServerConfig \{(.*?)\};", text, re.S).group(1)
            defaults = {}
            for line in body.splitlines():
                m = re.match(r"\s*[\w:<>]+\s+(\w+)\s*=\s*([^;]+);", line)
                if not m:
                    continue
                name, value = m.group(1), m.group(2).strip()
                if value.startswith('"'):
                    defaults[name] = value.strip('"')
                elif re.fullmatch(r"[\d.\s<*]+", value):
                    defaults[name] = eval(value, {"__builtins__": {}})  # digits, <<, * only
            self._defaults = defaults
        return self._defaults

    def server_help(self):
        result = subprocess.run([self.binary("abcd-server"), "--help"], capture_output=True,
                                text=True, timeout=30)
        return result.returncode, result.stdout

    def bundled_models(self):
        root = self.path("models", "checkpoints")
        return sorted(d for d in os.listdir(root)
                      if os.path.isfile(os.path.join(root, d, "config.json")))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


KUBECTL_MISSING = ("kubectl not on PATH: the Kubernetes manifests are rendered with `kubectl "
                   "kustomize` (kubectl 1.27+ bundles kustomize v5); install kubectl to run this")


class KubectlMissing(Exception):
    """Raised by render() where kubectl is not on PATH; the checks that need it skip (77)."""


def render(ctx, directory):
    """Renders a kustomization (a folder relative to the source tree) with `kubectl kustomize`
    and returns its objects. Raises KubectlMissing without kubectl, and AssertionError with
    kubectl's message when the render fails."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        raise KubectlMissing(KUBECTL_MISSING)
    out = subprocess.run([kubectl, "kustomize", ctx.path(directory)], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} exited {out.returncode}: "
                             f"{out.stderr.strip()}")
    return [o for o in yaml.safe_load_all(out.stdout) if o is not None]


def find(objects, kind, name=None):
    hits = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    if len(hits) != 1:
        raise AssertionError(f"expected one {kind} {name or ''}, found {len(hits)}")
    return hits[0]


# ---- Dockerfile ------------------------------------------------------------------------------

class Instruction:
    def __init__(self, keyword, args, line):
        self.keyword = keyword
        self.args = args
        self.line = line

    def exec_form(self):
        """The JSON array of CMD/ENTRYPOINT/RUN (None for shell form)."""
        text = self.args.strip()
        if self.keyword == "HEALTHCHECK":
            text = re.sub(r"^(--\S+\s+)*CMD\s+", "", text)
        if not text.startswith("["):
            return None
        return json.loads(text)

    def flags(self):
        return dict(re.findall(r"--([a-z-]+)=(\S+)", self.args.split("CMD")[0]
                                if self.keyword == "HEALTHCHECK" else self.args))


class Stage:
    def __init__(self, base, name, line):
        self.base = base
        self.name = name
        self.line = line
        self.instructions = []

    def all(self, keyword):
        return [i for i in self.instructions if i.keyword == keyword]


class Dockerfile:
    """Parses a Dockerfile: global ARGs, stages and their instructions (line continuations,
    comments and the default escape character; enough for this repository's file)."""

    def __init__(self, path):
        self.path = path
        self.global_args = {}
        self.stages = []
        self.directives = {}
        logical, start, current = [], 0, ""
        lines = read(path).splitlines()
        for number, raw in enumerate(lines, 1):
            stripped = raw.strip()
            if stripped.startswith("#"):
                m = re.match(r"#\s*(\w+)\s*=\s*(\S+)", stripped)
                if m and not logical and not current and number == len(self.directives) + 1:
                    self.directives[m.group(1).lower()] = m.group(2)  # parser directive
                continue  # comments, also inside a continuation
            if not current:
                start = number
                if not stripped:
                    continue
            if raw.rstrip().endswith("\\"):
                current += raw.rstrip()[:-1] + " "
                continue
            current += raw
            logical.append((start, current.strip()))
            current = ""
        if current:
            logical.append((start, current.strip()))
        for number, text in logical:
            keyword, _, args = text.partition(" ")
            keyword = keyword.upper()
            args = args.strip()
            if keyword == "FROM":
                parts = args.split()
                parts = [p for p in parts if not p.startswith("--")]
                name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
                self.stages.append(Stage(parts[0], name, number))
            elif keyword == "ARG" and not self.stages:
                name, _, default = args.partition("=")
                self.global_args[name] = default.strip('"')
            elif self.stages:
                self.stages[-1].instructions.append(Instruction(keyword, args, number))
            else:
                raise AssertionError(f"{path}:{number}: {keyword} before the first FROM")

    def stage(self, name):
        for s in self.stages:
            if s.name == name:
                return s
        raise AssertionError(f"Dockerfile: no stage named {name}")

    def substitute(self, text, args=None):
        values = {**self.global_args, **(args or {})}
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), ""), text)

    def resolve(self, stage_name, variant):
        """Follows FROM chains for a variant; returns the external base image reference."""
        image = self.stage(stage_name).base
        seen = set()
        while True:
            image = self.substitute(image, {"VARIANT": variant})
            names = {s.name for s in self.stages if s.name}
            if image not in names:
                return image
            if image in seen:
                raise AssertionError(f"Dockerfile: FROM cycle at {image}")
            seen.add(image)
            image = self.stage(image).base


def emulate_image(ctx, dockerfile, root):
    """Lays out the final stage's files under `root` (standing for the image's /) the way its
    COPY --from=build instructions would: the build stage's WORKDIR is this checkout and its
    build/ is ctest's build tree. /runtime-packages.txt is produced by running the build
    stage's runtime-packages.sh command. Returns the final stage."""
    build = dockerfile.stage("build")
    workdir = build.all("WORKDIR")[-1].args
    final = dockerfile.stages[-1]

    def source_path(path):
        if path.startswith(workdir.rstrip("/") + "/build/") or path == workdir.rstrip("/") + "/build":
            return ctx.build + path[len(workdir.rstrip("/") + "/build"):]
        if path.startswith(workdir.rstrip("/") + "/"):
            return os.path.join(ctx.source, path[len(workdir.rstrip("/")) + 1:])
        return None

    generated = {}
    for run in build.all("RUN"):
        m = re.search(r"(deploy/docker/runtime-packages\.sh\s+[^>]+)>\s*(\S+)", run.args)
        if m:
            argv = m.group(1).split()
            argv = [os.path.join(ctx.source, argv[0])] + [
                os.path.join(ctx.build, a[len("build/"):]) if a.startswith("build/") else a
                for a in argv[1:]]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise AssertionError(f"runtime-packages.sh failed: {out.stderr}")
            generated[m.group(2)] = out.stdout

    for copy_ in final.all("COPY"):
        words = copy_.args.split()
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        if "--from=build" not in flags:
            raise AssertionError(f"Dockerfile:{copy_.line}: final-stage COPY not from the build stage")
        *sources, dest = paths
        target = os.path.join(root, dest.lstrip("/"))
        if len(sources) > 1 or dest.endswith("/"):
            os.makedirs(target, exist_ok=True)
        for src in sources:
            if src in generated:
                out = os.path.join(target, os.path.basename(src)) if dest.endswith("/") else target
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with open(out, "w", encoding="utf-8") as f:
                    f.write(generated[src])
                continue
            local = source_path(src)
            if local is None or not os.path.exists(local):
                raise AssertionError(f"Dockerfile:{copy_.line}: {src} does not exist in the build stage ({local})")
            if os.path.isdir(local):
                shutil.copytree(local, target, dirs_exist_ok=True)
            elif dest.endswith("/") or os.path.isdir(target):
                shutil.copy2(local, os.path.join(target, os.path.basename(local)))
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy2(local, target)
    return final


def map_image_path(value, root):
    """/opt/... or /tmp/... in an argument (or a comma-separated list) -> the emulated image
    root."""
    def one(v):
        return os.path.join(root, v.lstrip("/")) if v.startswith(("/opt/", "/tmp/")) else v
    return ",".join(one(v) for v in value.split(","))


# ---- a real abcd-server ----------------------------------------------------------------------

class LiveServer:
    """Starts abcd-server with `argv` plus loopback/ephemeral-port overrides (given last, so they
    win over the config file and earlier flags); ports are read from --port_file: a temporary
    one added last, or `port_file` when argv already names it (the image's ENTRYPOINT does)."""

    def __init__(self, argv, env=None, start_timeout=60, port_file=None):
        self.argv = list(argv)
        self.env = env
        self.start_timeout = start_timeout
        self.port_file = port_file
        self.proc = None
        self.grpc_port = self.http_port = None
        self.tmp = tempfile.TemporaryDirectory(prefix="abcd-deploy-")
        self.log_path = os.path.join(self.tmp.name, "server.log")

    def __enter__(self):
        port_file = self.port_file or os.path.join(self.tmp.name, "ports.json")
        argv = self.argv + ["--host", "127.0.0.1", "--grpc_port", "0", "--http_port", "0",
                            "--admin_port", "0"]
        if self.port_file:
            if os.path.exists(port_file):
                os.remove(port_file)  # a stale one would be read before the server writes
        else:
            argv += ["--port_file", port_file]
        self.log = open(self.log_path, "w", encoding="utf-8")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + self.start_timeout
        while not os.path.exists(port_file):
            if self.proc.poll() is not None:
                raise AssertionError(f"abcd-server exited with {self.proc.returncode}: {' '.join(argv)}\n{self.logs()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"abcd-server did not start in {self.start_timeout}s\n{self.logs()}")
            time.sleep(0.02)
        with open(port_file, encoding="utf-8") as f:
            ports = json.load(f)
        self.grpc_port, self.http_port = ports["grpc_port"], ports["http_port"]
        return self

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.tmp.cleanup()

    def logs(self):
        self.log.flush()
        return read(self.log_path)

    def http(self, path, timeout=10):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=timeout) as r:
                return r.status, r.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")

    def mapped_pid_files(self):
        with open(f"/proc/{self.proc.pid}/maps", encoding="utf-8") as f:
            return {line.split()[-1] for line in f if "/" in line}

    def terminate(self, timeout):
        """SIGTERM (a drain); returns (exit status, seconds to exit)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed after timeout"
        return rc, time.monotonic() - start


def parse_exposition(text):
    """Prometheus text format -> {sample name: {"type": family type, "labels": set}}."""
    types = {}
    samples = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
            if not m:
                raise AssertionError(f"unparsable exposition line: {line}")
            labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"', m.group(3) or ""))
            samples.setdefault(m.group(1), set()).update(labels)
    out = {}
    for name, labels in samples.items():
        kind = types.get(name)
        if kind is None:
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                    kind = "histogram"
        out[name] = {"type": kind, "labels": labels}
    return out


def live_metrics(ctx):
    """Starts abcd-server on the bundled models and returns its /metrics catalogue."""
    with LiveServer([ctx.binary("abcd-server")]) as server:
        status, text = server.http("/metrics")
        if status != 200:
            raise AssertionError(f"/metrics answered {status}")
        return parse_exposition(text)


def metric_names_in(expr):
    """Every abcd_* identifier in a PromQL expression (a regex, independent of the parser)."""
    return set(re.findall(r"\babcd_[a-z0-9_]+\b", expr))


# ---- node-based validators (deploy/tools/*.mjs) ----------------------------------------------

def node_tools(ctx):
    """(node, tools dir) when the npm packages are installed (deploy.npm_ci), else None."""
    node = shutil.which("node")
    tools = ctx.path("deploy", "tools")
    if node and os.path.isdir(os.path.join(tools, "node_modules", "kubernetes-models")):
        return node, tools
    return None


def run_node(ctx, script, payload):
    node, tools = node_tools(ctx)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(payload, f)
        path = f.name
    try:
        return subprocess.run([node, os.path.join(tools, script), path], capture_output=True,
                              text=True, timeout=120)
    finally:
        os.unlink(path)


@contextlib.contextmanager
def temp_dir():
    with tempfile.TemporaryDirectory(prefix="abcd-deploy-") as d:
        yield d


# ---- shared by deploy_checks.py and stack_checks.py -----------------------------------------

OVERLAYS = ("cpu", "gpu")
DRAIN_SHUTDOWN_SECONDS = 1  # main.cc: grpc_server->Shutdown(now + 1 s) after the grace
DRAIN_MARGIN_SECONDS = 5


def mib(quantity):
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024,
             "K": 1e3 / 2**20, "M": 1e6 / 2**20, "G": 1e9 / 2**20}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", str(quantity))
    if not m or (m.group(2) and m.group(2) not in units):
        raise AssertionError(f"cannot read quantity {quantity!r}")
    return float(m.group(1)) * (units[m.group(2)] if m.group(2) else 1 / 2**20)


def flag_pairs(args):
    """['--a', 'x', '--b=y'] -> [('a', 'x'), ('b', 'y')] (every server flag takes a value)."""
    pairs, i = [], 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise AssertionError(f"unexpected argument {arg!r}")
        name, eq, value = arg[2:].partition("=")
        if not eq:
            i += 1
            value = args[i] if i < len(args) else None
        pairs.append((name, value))
        i += 1
    return pairs


def interpolate_compose(text):
    """${VAR:-default} / ${VAR-default} / ${VAR} with the variables unset (the defaults)."""
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", text)


def seconds(duration):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    if not m or not duration:
        raise AssertionError(f"cannot read duration {duration!r}")
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


def entrypoint_port_file(df):
    """The --port_file the image's ENTRYPOINT passes (where abcd-server writes its ports)."""
    entry = (df.stages[-1].all("ENTRYPOINT") or [None])[-1]
    argv = (entry.exec_form() if entry else None) or []
    return argv[argv.index("--port_file") + 1] if "--port_file" in argv[:-1] else None
