#!/usr/bin/env python3
"""The deploy.* ctest checks: the Dockerfile, the Kubernetes manifests, the compose stack and the
Grafana dashboard, validated offline (no Docker engine, no cluster) and against the real server.

    tests/deploy/deploy_checks.py CHECK --source-dir DIR --build-dir DIR

Checks (one ctest each, `ctest -R deploy`):
  dockerfile       stages, pins, no syntax directive, CUDA variant, the builder's TARGETS
                   cover what is shipped (no tests), USER 1000, EXPOSE, HEALTHCHECK reads the
                   ENTRYPOINT's --port_file, plugin COPY, .dockerignore against the tracked files
  dockerfile_lint  dockerfile-utils lint (npm)                               [skips without npm]
  docker_image     the final stage's COPYs emulated over this build; its ENTRYPOINT+CMD run on
                   ephemeral ports, its HEALTHCHECK, unchanged, passes (and fails once the
                   server is gone), the plugin is loaded from next to the binaries
  k8s_render       every kustomization renders (kustomize_lite); identical to `kubectl
                   kustomize` when kubectl is installed; renderer unit checks; the redis
                   overlay's Redis wiring (Service, selectors, security, NetworkPolicy)
  k8s_schema       every rendered object against the Kubernetes/Prometheus-operator schemas,
                   unknown fields included (npm kubernetes-models)           [skips without npm]
  contract         manifests vs the server: flags, config keys, ports, probes, drain times,
                   security, resources, HPA/adapter metric; each overlay's exact command and
                   ConfigMap started as a real abcd-server (health, models, metrics, drain);
                   the redis overlay too once abcd-server has --session_store
  compose          the compose stack: replicas, ports, config, stop grace, Redis, Prometheus
                   targets, Grafana provisioning; its command started as a real abcd-server
  grafana          dashboard JSON: structure, required panels, every metric exported
  promql           every PromQL expression parsed with Prometheus' grammar (npm); metrics,
                   labels, rate() on counters, `le` in histogram_quantile    [skips without npm]
  shellcheck       the deployment shell scripts                        [skips without shellcheck]
Exit status: 0 pass, 1 fail, 77 skipped.
"""

import argparse
import copy
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploylib import (SKIP, TARGET_LABELS, Check, Context, Dockerfile, LiveServer,  # noqa: E402
                       emulate_image, find, live_metrics, load_yaml, map_image_path,
                       metric_names_in, node_tools, parse_exposition, read, render, run_node,
                       temp_dir)

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


# ---- Dockerfile ------------------------------------------------------------------------------

def entrypoint_port_file(df):
    """The --port_file the image's ENTRYPOINT passes (where abcd-server writes its ports)."""
    entry = (df.stages[-1].all("ENTRYPOINT") or [None])[-1]
    argv = (entry.exec_form() if entry else None) or []
    return argv[argv.index("--port_file") + 1] if "--port_file" in argv[:-1] else None


def dockerignore_patterns(path):
    patterns = []
    for line in read(path).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif pattern.startswith("**", i):
                regex += ".*"
                i += 2
            elif pattern[i] == "*":
                regex += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                regex += "[^/]"
                i += 1
            else:
                regex += re.escape(pattern[i])
                i += 1
        patterns.append((re.compile(regex + "(?:/.*)?"), negate))
    return patterns


def dockerignored(patterns, path):
    """moby/patternmatcher semantics: the last matching pattern decides; a directory pattern
    covers everything below it."""
    excluded = False
    for regex, negate in patterns:
        if regex.fullmatch(path):
            excluded = not negate
    return excluded


def tracked_files(ctx):
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ctx.source, capture_output=True,
                             check=True, timeout=60)
        return [p for p in out.stdout.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk(ctx.source):  # no git: skip what .gitignore does
            dirs[:] = [d for d in dirs if not (d.startswith("build") or d in (
                ".git", ".cache", "node_modules", "__pycache__"))]
            files += [os.path.relpath(os.path.join(root, n), ctx.source) for n in names
                      if not n.endswith(".pyc")]
        files = [f for f in files if not f.startswith("models/data/out/")]
        return files


def check_dockerfile(ctx, c):
    df = Dockerfile(ctx.path("Dockerfile"))
    defaults = ctx.server_defaults()
    flags = set(ctx.server_flags())
    names = [s.name for s in df.stages]
    c.equal(df.global_args.get("VARIANT"), "cpu", "ARG VARIANT default")
    for stage in ("build-cpu", "build-cuda", "build", "runtime-cpu", "runtime-cuda", "runtime"):
        c.expect(stage in names, f"Dockerfile has a stage named {stage}")
    c.equal(df.stage("build").base, "build-${VARIANT}", "the build stage follows VARIANT")
    c.equal(df.stages[-1].name, "runtime", "the final stage")
    c.equal(df.stages[-1].base, "runtime-${VARIANT}", "the runtime stage follows VARIANT")

    bases = {v: (df.resolve("build", v), df.resolve("runtime", v)) for v in ("cpu", "cuda")}
    for variant, refs in bases.items():
        for ref in refs:
            repo, _, tag = ref.rpartition(":")
            c.expect(repo and "/" not in tag and tag != "latest" and re.search(r"\d+\.\d+", tag),
                     f"{variant}: base image {ref} is pinned to a version tag")
    build_cpu, runtime_cpu = bases["cpu"]
    c.expect(build_cpu.startswith("debian:12"), f"CPU builder is Debian 12 (setup.sh's target): {build_cpu}")
    c.equal(runtime_cpu, build_cpu + "-slim", "CPU runtime is the same Debian release, slim")
    build_cuda, runtime_cuda = bases["cuda"]
    c.expect(build_cuda.startswith("nvidia/cuda:") and "-devel-" in build_cuda,
             f"CUDA builder is an nvidia/cuda devel image: {build_cuda}")
    c.equal(runtime_cuda, build_cuda.replace("-devel-", "-runtime-"),
            "CUDA runtime is the matching nvidia/cuda runtime image")
    archs = [i.args for i in df.stage("build-cuda").all("ENV") if "CUDAARCHS" in i.args]
    c.expect(archs and re.search(r'CUDAARCHS="?\d+(;\d+)*"?', archs[0]),
             "CUDA builder pins the GPU architectures (CUDAARCHS=NN;NN...)")

    build = df.stage("build")
    runs = " ".join(i.args for i in build.all("RUN"))
    c.expect("deploy/scripts/setup.sh build" in runs, "the builder runs the README's script: setup.sh build")
    c.expect(re.search(r"^\s*build\)", read(ctx.path("deploy/scripts/setup.sh")), re.M),
             "deploy/scripts/setup.sh has a build mode")
    c.expect(any(re.fullmatch(r"\.\s+\.?/?", i.args) for i in build.all("COPY")),
             "the builder copies the checkout (COPY . .)")
    c.expect("runtime-packages.sh" in runs, "the builder derives the runtime packages from ldd")
    c.expect("syntax" not in df.directives,
             "no `# syntax=` directive (BuildKit would fetch a frontend image: offline builds fail)")
    c.expect(re.search(r"\bBUILD_TESTS=OFF\s[^&;]*setup\.sh build", runs),
             "the builder builds without the test suites (BUILD_TESTS=OFF setup.sh build)")
    c.expect(re.search(r"\bTARGETS=\"?\$\{?TARGETS\b[^&;]*setup\.sh build", runs),
             "the builder builds only ARG TARGETS (TARGETS=\"${TARGETS}\" setup.sh build)")
    target_args = [i.args for i in build.all("ARG") if i.args.startswith("TARGETS=")]
    targets = target_args[-1].partition("=")[2].strip('"').split() if target_args else []

    final = df.stages[-1]
    users = final.all("USER")
    c.expect(users and users[-1].args.split(":")[0] == "1000", "the image runs as USER 1000")
    positions = [n for n, i in enumerate(final.instructions) if i.keyword in ("RUN", "USER")]
    c.expect(users and final.instructions[positions[-1]].keyword == "USER",
             "USER 1000 comes after every RUN of the final stage")
    final_runs = " ".join(i.args for i in final.all("RUN"))
    c.expect(re.search(r"useradd[^&;]*--uid 1000", final_runs), "the final stage creates uid 1000")
    c.expect("--no-install-recommends" in final_runs and "rm -rf /var/lib/apt/lists" in final_runs,
             "runtime apt-get: no recommends, lists removed in the same layer")
    exposed = {int(p.split("/")[0]) for i in final.all("EXPOSE") for p in i.args.split()}
    c.equal(exposed, {defaults["grpc_port"], defaults["http_port"]},
            "EXPOSE = the server's default gRPC and HTTP ports")
    stop = final.all("STOPSIGNAL")
    c.expect(not stop or stop[-1].args == "SIGTERM", "STOPSIGNAL is SIGTERM (the server's drain)")

    checks = final.all("HEALTHCHECK")
    c.equal(len(checks), 1, "one HEALTHCHECK")
    port_file = entrypoint_port_file(df)
    c.expect(port_file and port_file.startswith("/tmp/"),
             f"the ENTRYPOINT writes the bound ports to a --port_file in /tmp: {port_file}")
    if checks:
        argv = checks[0].exec_form() or []
        c.expect(len(argv) >= 4 and os.path.basename(argv[0]) == "abcd-client" and argv[1] == "health",
                 f"HEALTHCHECK runs abcd-client health (grpc.health.v1): {argv}")
        c.expect("--target" not in argv, "HEALTHCHECK has no fixed --target (it follows the port)")
        hc_file = argv[argv.index("--port_file") + 1] if "--port_file" in argv[:-1] else None
        c.expect(port_file and hc_file == port_file,
                 f"HEALTHCHECK reads the ENTRYPOINT's --port_file: {hc_file} vs {port_file}")
        hc_flags = checks[0].flags()
        c.expect("start-period" in hc_flags, "HEALTHCHECK has a start period for model load")

    copies = {}
    for i in final.all("COPY"):
        words = [w for w in i.args.split() if not w.startswith("--")]
        for src in words[:-1]:
            copies[src.rstrip("/")] = words[-1]
    def dest(name):
        return next((d for s, d in copies.items() if s.endswith("/" + name)), None)
    bin_dir = dest("abcd-server")
    for name in ("abcd-server", "abcd-client", "abcd-cli"):
        c.expect(dest(name) is not None, f"the final stage copies {name}")
    plugin_dir = dest("libabcd_sentencepiece.so")
    c.expect(plugin_dir is not None and bin_dir is not None and os.path.normpath(plugin_dir) in (
        os.path.normpath(bin_dir), os.path.normpath(os.path.join(bin_dir, "..", "lib"))),
        f"libabcd_sentencepiece.so is copied next to the binaries ({plugin_dir} vs {bin_dir})")
    models_dir = dest("checkpoints")
    c.expect(models_dir is not None, "the bundled models (models/checkpoints) are copied")
    built = [os.path.basename(s) for s in copies if "/build/" in s]
    c.expect(built, "the final stage copies build outputs")
    for name in built:  # CMake target names: abcd-server, libabcd_sentencepiece.so -> abcd_sentencepiece
        target = re.sub(r"^lib(.*)\.so$", r"\1", name)
        c.expect(target in targets, f"the builder's TARGETS {targets} build the shipped {name}")

    entry = (final.all("ENTRYPOINT") or [None])[-1]
    entry_argv = entry.exec_form() if entry else None
    c.expect(entry_argv and bin_dir and entry_argv[0] == os.path.join(bin_dir, "abcd-server"),
             f"ENTRYPOINT is the copied abcd-server, exec form: {entry_argv}")
    cmd = (final.all("CMD") or [None])[-1]
    cmd_argv = cmd.exec_form() if cmd else None
    c.expect(cmd_argv is not None, "CMD in exec form")
    bundled = ctx.bundled_models()
    for name, value in flag_pairs(cmd_argv or []):
        c.expect(name in flags, f"CMD flag --{name} is a server flag")
        if name == "models":
            for m in value.split(","):
                c.expect(models_dir and m.startswith(models_dir.rstrip("/") + "/")
                         and os.path.basename(m) in bundled,
                         f"CMD model {m} is a bundled checkpoint in the image")
    for i in final.all("ENV"):
        m = re.search(r"ABCD_MODEL=(\S+)", i.args)
        if m:
            c.expect(os.path.basename(m.group(1)) in bundled, f"ENV ABCD_MODEL {m.group(1)} is bundled")

    text = read(ctx.path("Dockerfile"))
    c.expect(not re.search(r"^\s*ADD\s+https?://", text, re.M | re.I), "no ADD of URLs")
    c.expect(":latest" not in text, "no :latest images")

    patterns = dockerignore_patterns(ctx.path(".dockerignore"))
    files = tracked_files(ctx)
    dropped = [f for f in files if dockerignored(patterns, f)]
    c.expect(not dropped, f".dockerignore keeps every tracked file in the context: drops {dropped[:5]}")
    for path in ("build/CMakeCache.txt", ".git/HEAD", "deploy/tools/node_modules/x/package.json",
                 "models/data/out/corpus.txt", "build-metrics/x", "models/__pycache__/a.pyc"):
        c.expect(dockerignored(patterns, path), f".dockerignore keeps {path} out of the context")
    for path in ("deploy/scripts/setup.sh", "deploy/docker/runtime-packages.sh",
                 "models/checkpoints/abc-lm-untrained/model.safetensors", "CMakeLists.txt"):
        c.expect(not dockerignored(patterns, path), f".dockerignore keeps {path} in the context")


def check_dockerfile_lint(ctx, c):
    if not node_tools(ctx):
        print("deploy.dockerfile_lint: npm packages not installed (deploy.npm_ci); skipped")
        return SKIP
    node, tools = node_tools(ctx)
    lint = os.path.join(tools, "lint-dockerfile.mjs")
    out = subprocess.run([node, lint, ctx.path("Dockerfile")], capture_output=True, text=True, timeout=60)
    print(out.stdout, end="")
    c.equal(out.returncode, 0, "dockerfile-utils finds no problem in Dockerfile")
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", delete=False) as f:
        f.write("FROM debian:12 AS a\nexpose abc\nHEALTHCHECK --interval=zz CMD true\n")
    try:
        bad = subprocess.run([node, lint, f.name], capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(f.name)
    c.expect(bad.returncode == 1 and bad.stdout.count("\n") >= 4,
             f"the linter catches a broken Dockerfile (control): {bad.stdout}")


def check_docker_image(ctx, c):
    df = Dockerfile(ctx.path("Dockerfile"))
    final = df.stages[-1]
    defaults = ctx.server_defaults()
    with temp_dir() as root:
        emulate_image(ctx, df, root)
        packages = read(os.path.join(root, "tmp", "runtime-packages.txt")).split()
        # The HTTP server is header-only Boost.Beast: no HTTP library is loaded at run time; the
        # CPU kernels are abcd's own (no BLAS).
        for prefix in ("libgrpc++", "libprotobuf", "libabsl", "libsentencepiece",
                       "libprometheus-cpp-core", "libhiredis"):
            c.expect(any(p.startswith(prefix) for p in packages),
                     f"runtime packages include {prefix}*: {packages}")
        entry = final.all("ENTRYPOINT")[-1].exec_form()
        cmd = final.all("CMD")[-1].exec_form()
        bin_dir = os.path.dirname(map_image_path(entry[0], root))
        for name in ("abcd-server", "abcd-client", "abcd-cli", "libabcd_sentencepiece.so"):
            c.expect(os.path.isfile(os.path.join(bin_dir, name)), f"image has {name} in {bin_dir}")

        env = {k: v for k, v in os.environ.items()
               if k not in ("ABCD_SENTENCEPIECE_PLUGIN", "ABCD_MODEL")}
        for i in final.all("ENV"):
            for name, value in re.findall(r'(\w+)=("[^"]*"|\S+)', i.args):
                value = value.strip('"').replace("$PATH", env.get("PATH", ""))
                env[name] = ":".join(map_image_path(v, root) for v in value.split(":"))
        # The ENTRYPOINT as it is (its --port_file mapped into the emulated /tmp), on ephemeral
        # ports: the HEALTHCHECK, unchanged, must find the gRPC port through that file.
        argv = [map_image_path(a, root) for a in entry + cmd]
        port_file = entrypoint_port_file(df)
        with LiveServer(argv, env=env, port_file=port_file and map_image_path(port_file, root)) as server:
            plugin = os.path.realpath(os.path.join(bin_dir, "libabcd_sentencepiece.so"))
            c.expect(plugin in server.mapped_pid_files(),
                     "the server loaded the SentencePiece plugin from next to its binary")
            status, body = server.http("/v1/models")
            want = sorted(os.path.basename(m) for m in dict(flag_pairs(cmd))["models"].split(","))
            got = sorted(m["id"] for m in json.loads(body)["data"]) if status == 200 else None
            c.equal(got, want, "the image's CMD serves its models")
            hc = [map_image_path(a, root) for a in final.all("HEALTHCHECK")[-1].exec_form()]
            c.expect(server.grpc_port != defaults["grpc_port"], "the server runs on another gRPC port")
            out = subprocess.run(hc, capture_output=True, text=True, env=env, timeout=30)
            c.expect(out.returncode == 0 and out.stdout.strip() == "SERVING",
                     f"HEALTHCHECK command passes on port {server.grpc_port}: {out.returncode} "
                     f"{out.stdout} {out.stderr}")
            c.equal(server.http("/readyz")[0], 200, "/readyz")
            rc, took = server.terminate(defaults["drain_grace_seconds"] + 10)
            c.equal(rc, 0, "SIGTERM: the server drains and exits 0")
            out = subprocess.run(hc, capture_output=True, text=True, env=env, timeout=30)
            c.expect(out.returncode != 0, f"HEALTHCHECK fails once the server is gone (control): {out.stdout}")
        cli = shutil.which("abcd-cli", path=env["PATH"])
        c.expect(cli and cli.startswith(root), f"abcd-cli is on the image's PATH: {cli}")
        if cli:
            out = subprocess.run([cli, "info"], capture_output=True, text=True, env=env, timeout=60)
            c.expect(out.returncode == 0, f"abcd-cli info with the image's ABCD_MODEL: {out.stderr}")


# ---- Kubernetes ------------------------------------------------------------------------------

def kustomizations(ctx):
    root = ctx.path("deploy", "k8s")
    found = []
    for d, _, files in os.walk(root):
        if "kustomization.yaml" in files:
            found.append(os.path.relpath(d, ctx.source))
    return sorted(found)


def renderer_unit_checks(ctx, c, kubectl):
    sys.path.insert(0, ctx.path("deploy", "tools"))
    import kustomize_lite as kl  # noqa: E402
    sys.path.pop(0)
    # Known answers from kustomize v5.5 (kubectl 1.32): configMapGenerator literals a=b.
    c.equal(kl.config_map_hash({"data": {"a": "b"}}), "4h2mbtbbt6", "ConfigMap hash suffix")
    c.equal(kl.config_map_hash({"data": {"k": "<&>"}}), kl.config_map_hash({"data": {"k": "<&>"}}),
            "hash is deterministic")
    doc = {"a": {"b": [1, 2]}, "c": 1}
    kl._json_patch(doc, [{"op": "add", "path": "/a/b/-", "value": 3},
                         {"op": "add", "path": "/a/b/0", "value": 0},
                         {"op": "replace", "path": "/c", "value": 2},
                         {"op": "copy", "from": "/c", "path": "/d"},
                         {"op": "move", "from": "/d", "path": "/a/e~1f"},
                         {"op": "remove", "path": "/a/b/1"},
                         {"op": "test", "path": "/c", "value": 2}], "unit")
    c.equal(doc, {"a": {"b": [0, 2, 3], "e/f": 2}, "c": 2}, "JSON 6902 operations")

    with temp_dir() as d:
        base, overlay = os.path.join(d, "base"), os.path.join(d, "overlay")
        os.makedirs(base)
        os.makedirs(overlay)
        with open(os.path.join(base, "kustomization.yaml"), "w") as f:
            f.write("resources: [app.yaml]\nconfigMapGenerator:\n- name: cfg\n  literals: [a=1]\n")
        with open(os.path.join(base, "app.yaml"), "w") as f:
            f.write("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app}\nspec:\n"
                    "  selector: {matchLabels: {app: x}}\n  template:\n    metadata: {labels: {app: x}}\n"
                    "    spec:\n      initContainers: [{name: i, image: 'reg:5000/tool:1'}]\n"
                    "      containers: [{name: c, image: tool, envFrom: [{configMapRef: {name: cfg}}]}]\n"
                    "      volumes: [{name: v, configMap: {name: cfg}}]\n")
        with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
            f.write("resources: [../base]\nconfigMapGenerator:\n- name: cfg\n  behavior: merge\n"
                    "  literals: [b=2]\nimages:\n- name: tool\n  digest: sha256:" + "0" * 64 +
                    "\n- name: reg:5000/tool\n  newTag: '2'\nlabels:\n- pairs: {tier: x}\n"
                    "patches:\n- target: {kind: Deployment, name: ap.*}\n  patch: |-\n"
                    "    - {op: add, path: /spec/replicas, value: 3}\n")
        objects = kl.build(overlay)
        cm = find(objects, "ConfigMap")
        dep = find(objects, "Deployment")
        c.equal(cm["data"], {"a": "1", "b": "2"}, "behavior: merge")
        c.expect(cm["metadata"]["name"].startswith("cfg-"), "generated name gets a hash suffix")
        spec = dep["spec"]["template"]["spec"]
        c.equal(spec["volumes"][0]["configMap"]["name"], cm["metadata"]["name"], "volume reference renamed")
        c.equal(spec["containers"][0]["envFrom"][0]["configMapRef"]["name"], cm["metadata"]["name"],
                "envFrom reference renamed")
        c.equal(spec["containers"][0]["image"], "tool@sha256:" + "0" * 64, "images digest")
        c.equal(spec["initContainers"][0]["image"], "reg:5000/tool:2", "images newTag with a registry port")
        c.expect("tier" not in dep["spec"]["template"]["metadata"]["labels"],
                 "labels without includeTemplates leave templates alone")
        c.equal(dep["spec"]["replicas"], 3, "patch target name is a regular expression")
        if kubectl:
            real = subprocess.run([kubectl, "kustomize", overlay], capture_output=True, text=True, timeout=60)
            c.equal(list(yaml.safe_load_all(real.stdout)), objects,
                    "renderer fixture: kustomize_lite == kubectl kustomize")
        for bad, why in (("namePrefix: x-\nresources: [../base]\n", "namePrefix"),
                         ("resources: [../base]\npatches:\n- patch: |-\n    kind: Deployment\n", "no target"),
                         ("resources: [../base]\npatches:\n- target: {kind: Deployment}\n  patch: |-\n"
                          "    apiVersion: apps/v1\n    kind: Deployment\n", "strategic merge"),
                         ("resources: [../base]\nlabels:\n- pairs: {a: b}\n  includeSelectors: true\n",
                          "includeSelectors")):
            with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
                f.write(bad)
            try:
                kl.build(overlay)
                c.expect(False, f"kustomize_lite rejects {why}")
            except kl.KustomizeError:
                c.passed += 1


def check_k8s_render(ctx, c):
    kubectl = shutil.which("kubectl")
    sys.path.insert(0, ctx.path("deploy", "tools"))
    import kustomize_lite as kl  # noqa: E402
    sys.path.pop(0)
    dirs = kustomizations(ctx)
    c.expect({"deploy/k8s/base", "deploy/k8s/overlays/cpu", "deploy/k8s/overlays/gpu"} <= set(dirs),
             f"kustomizations: {dirs}")
    base_kinds = None
    for d in dirs:
        try:
            objects = kl.build(ctx.path(d))
        except kl.KustomizeError as e:
            c.expect(False, f"{d}: {e}")
            continue
        c.note(f"{d}: {len(objects)} objects")
        kinds = sorted((o["kind"], o["metadata"]["name"].split("-")[0]) for o in objects)
        if d.endswith("/base"):
            base_kinds = kinds
        elif "/overlays/" in d and base_kinds is not None:
            missing = list(base_kinds)
            for k in kinds:
                if k in missing:
                    missing.remove(k)
            c.equal(missing, [], f"{d} renders every object of the base")
            if d.endswith("/overlays/redis"):
                check_redis_overlay(c, objects)
        if kubectl:
            real = subprocess.run([kubectl, "kustomize", ctx.path(d)], capture_output=True,
                                  text=True, timeout=120)
            c.equal(real.returncode, 0, f"kubectl kustomize {d}: {real.stderr}")
            if real.stdout != kl.to_yaml(objects) and list(yaml.safe_load_all(real.stdout)) == objects:
                c.note(f"{d}: same objects as kubectl kustomize (formatting differs)")
                c.passed += 1
            elif real.stdout != kl.to_yaml(objects):
                import difflib
                diff = "".join(difflib.unified_diff(real.stdout.splitlines(True),
                                                    kl.to_yaml(objects).splitlines(True),
                                                    "kubectl", "kustomize_lite", n=1))
                c.expect(False, f"{d}: kustomize_lite differs from kubectl kustomize:\n{diff}")
            else:
                c.passed += 1
    if not kubectl:
        c.note("kubectl not installed: kustomize_lite output not cross-checked against kustomize")
    renderer_unit_checks(ctx, c, kubectl)
    for overlay, tag in (("cpu", "cpu"), ("gpu", "cuda")):
        image = find(kl.build(ctx.path("deploy/k8s/overlays", overlay)), "Deployment")[
            "spec"]["template"]["spec"]["containers"][0]["image"]
        c.expect(image.rpartition(":")[2].endswith(tag), f"{overlay} overlay runs the {tag} image: {image}")


def check_redis_overlay(c, objects):
    """The redis overlay: abcd's --session_store names the overlay's Redis Service, which
    selects the Redis pods (and not abcd's) on the container's port; the Redis pod is locked
    down like abcd's; a NetworkPolicy admits only the abcd pods."""
    where = "[redis]"
    abcd = find(objects, "Deployment", "abcd")
    args = abcd["spec"]["template"]["spec"]["containers"][0]["args"]
    url = dict(flag_pairs(args)).get("session_store", "")
    m = re.fullmatch(r"redis://([a-z0-9.-]+):(\d+)(?:/(\d+))?", url)
    c.expect(m, f"{where} abcd runs with --session_store redis://HOST:PORT[/DB]: {url!r}")
    if not m:
        return
    svc = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == m.group(1)]
    c.expect(len(svc) == 1, f"{where} --session_store host {m.group(1)} is a Service of the overlay")
    redis = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] != "abcd"]
    c.expect(len(redis) == 1, f"{where} one Redis Deployment")
    if len(svc) != 1 or len(redis) != 1:
        return
    spec, pod_meta = svc[0]["spec"], redis[0]["spec"]["template"]["metadata"]
    pod = redis[0]["spec"]["template"]["spec"]
    abcd_labels = abcd["spec"]["template"]["metadata"]["labels"]

    def selects(selector, labels):
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())
    c.expect(selects(spec["selector"], pod_meta["labels"]), f"{where} the Service selects the Redis pods")
    c.expect(not selects(spec["selector"], abcd_labels), f"{where} the Service does not select abcd pods")
    for o in objects:
        sel = o.get("spec", {}).get("selector", {})
        sel = sel.get("matchLabels", sel) if isinstance(sel, dict) else {}
        if o is not svc[0] and o["kind"] in ("Service", "PodDisruptionBudget", "PodMonitor"):
            c.expect(not selects(sel, pod_meta["labels"]),
                     f"{where} {o['kind']} {o['metadata']['name']} does not select the Redis pods")
    ctr = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
    port = [p for p in spec["ports"] if p["port"] == int(m.group(2))]
    c.expect(port and ports.get(port[0]["targetPort"], port[0]["targetPort"]) in ports.values(),
             f"{where} Service port {m.group(2)} reaches the Redis container port")
    c.equal(redis[0]["spec"].get("replicas", 1), 1, f"{where} one Redis (sessions are not sharded)")
    psc, csc = pod.get("securityContext", {}), ctr.get("securityContext", {})
    c.expect(psc.get("runAsNonRoot") is True and psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
             f"{where} Redis pod: non-root, seccomp")
    c.expect(csc.get("readOnlyRootFilesystem") is True and csc.get("allowPrivilegeEscalation") is False
             and csc.get("capabilities", {}).get("drop") == ["ALL"], f"{where} Redis container locked down")
    c.expect(pod.get("automountServiceAccountToken") is False, f"{where} Redis: no API token mounted")
    c.expect("memory" in ctr.get("resources", {}).get("limits", {}) and "readinessProbe" in ctr,
             f"{where} Redis has a memory limit and a readiness probe")
    c.expect(re.search(r":\d+\.\d+\.\d+$", ctr["image"]) and ctr["image"].startswith("redis:7"),
             f"{where} Redis image pinned (redis:7.x.y): {ctr['image']}")
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"
                and selects(o["spec"]["podSelector"].get("matchLabels", {}), pod_meta["labels"])]
    c.expect(len(policies) == 1, f"{where} a NetworkPolicy guards Redis")
    if policies:
        sources = [f.get("podSelector", {}).get("matchLabels", {})
                   for rule in policies[0]["spec"].get("ingress", []) for f in rule.get("from", [])]
        c.expect(sources and all(selects(src, abcd_labels) for src in sources),
                 f"{where} the NetworkPolicy admits only abcd pods: {sources}")


def check_k8s_schema(ctx, c):
    if not node_tools(ctx):
        print("deploy.k8s_schema: npm packages not installed (deploy.npm_ci); skipped")
        return SKIP
    for d in kustomizations(ctx):
        objects = render(ctx, d)
        out = run_node(ctx, "validate-k8s.mjs", objects)
        print(f"{d}:\n{out.stdout}", end="")
        c.expect(out.returncode == 0, f"{d}: objects valid against the schemas: {out.stdout}{out.stderr}")
    bad = copy.deepcopy(find(render(ctx, "deploy/k8s/overlays/gpu"), "Deployment"))
    container = bad["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"]["grpc"]["sevice"] = ""
    container["resources"]["limits"]["memory"] = "3 GiB"
    out = run_node(ctx, "validate-k8s.mjs", [bad])
    c.expect(out.returncode == 1 and "sevice: unknown field" in out.stdout and "quantity" in out.stdout,
             f"the validator catches a misspelt field and a bad quantity (control): {out.stdout}")


def effective_config(defaults, config, args):
    eff = dict(defaults)
    eff.update(config)
    for name, value in flag_pairs(args):
        eff[name] = value
    return eff


def check_contract(ctx, c):
    flags = set(ctx.server_flags())
    defaults = ctx.server_defaults()
    rc, usage = ctx.server_help()
    c.equal(rc, 0, "abcd-server --help")
    c.equal(set(re.findall(r"--([a-z_]+)", usage)), flags,
            "abcd-server --help lists exactly the flags server_config.cc accepts")
    for name in ("grpc_port", "http_port", "drain_grace_seconds", "max_connection_age_seconds",
                 "max_waiting_requests", "state_budget_mb"):
        c.expect(name in flags and name in defaults, f"server flag/default {name}")

    df = Dockerfile(ctx.path("Dockerfile"))
    entry = df.stages[-1].all("ENTRYPOINT")[-1].exec_form()
    image_uid = int(df.stages[-1].all("USER")[-1].args.split(":")[0])
    adapter = load_yaml(ctx.path("deploy/k8s/prometheus-adapter/values.yaml"))
    rules = adapter["rules"]["custom"]
    bundled = ctx.bundled_models()
    catalogue = None

    overlays = list(OVERLAYS)
    if "session_store" in flags:
        overlays.append("redis")
    else:
        c.note("abcd-server has no --session_store yet: the redis overlay is checked by k8s_render only")
    with temp_dir() as root:
        emulate_image(ctx, df, root)
        for overlay in overlays:
            where = f"[{overlay}]"
            objects = render(ctx, f"deploy/k8s/overlays/{overlay}")
            dep = find(objects, "Deployment", "abcd")
            pod = dep["spec"]["template"]["spec"]
            pod_labels = dep["spec"]["template"]["metadata"]["labels"]
            ctr = next(x for x in pod["containers"] if x["name"] == "abcd")
            c.equal(ctr["command"], entry, f"{where} container command is the image's ENTRYPOINT")
            args = ctr["args"]
            names = [n for n, _ in flag_pairs(args)]
            for n in names:
                c.expect(n in flags, f"{where} container flag --{n} is a server flag")
            for n in ("host", "grpc_port", "http_port", "port_file"):
                c.expect(n not in names, f"{where} --{n} is set in config.json, not the args")

            # $(VAR) expansion as the kubelet does it.
            config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
            env = {}
            for e in ctr.get("env", []):
                if "value" in e:
                    env[e["name"]] = e["value"]
                elif "configMapKeyRef" in e["valueFrom"]:
                    ref = e["valueFrom"]["configMapKeyRef"]
                    c.expect(ref["name"] in config_maps and ref["key"] in config_maps[ref["name"]]["data"],
                             f"{where} env {e['name']} refers to an existing ConfigMap key")
                    env[e["name"]] = config_maps[ref["name"]]["data"][ref["key"]]
                elif "resourceFieldRef" in e["valueFrom"]:
                    # What the kubelet substitutes: the container's resource, divided by the
                    # divisor and rounded up (cpu "2" or "1500m" with divisor 1 -> 2).
                    ref = e["valueFrom"]["resourceFieldRef"]
                    kind, _, name = ref["resource"].partition(".")
                    quantity = str(ctr.get("resources", {}).get(kind, {}).get(name, ""))
                    c.expect(quantity != "", f"{where} env {e['name']} refers to a set {ref['resource']}")
                    if quantity:
                        cores = float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
                        env[e["name"]] = str(max(1, math.ceil(cores / float(ref.get("divisor", "1")))))
            for arg in args:
                for var in re.findall(r"\$\((\w+)\)", arg):
                    c.expect(var in env, f"{where} $({var}) in args is defined in env")
            args = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]
            argmap = dict(flag_pairs(args))

            config_path = argmap.get("config")
            mounts = {m["mountPath"]: m for m in ctr.get("volumeMounts", [])}
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            mount = mounts.get(os.path.dirname(config_path or ""))
            volume = volumes.get(mount["name"]) if mount else None
            cm_name = volume["configMap"]["name"] if volume and "configMap" in volume else None
            c.expect(cm_name in config_maps, f"{where} --config {config_path} is mounted from a ConfigMap")
            if cm_name not in config_maps:
                continue
            items = {i["path"]: i["key"] for i in volume["configMap"].get("items", [])}
            key = items.get(os.path.basename(config_path), os.path.basename(config_path))
            config_text = config_maps[cm_name]["data"][key]
            config = json.loads(config_text)
            c.expect(set(config) <= flags - {"config", "port_file"},
                     f"{where} config.json keys are server flags: {sorted(set(config) - flags)}")
            eff = effective_config(defaults, config, args)
            grpc, http = int(eff["grpc_port"]), int(eff["http_port"])
            # Metrics are scraped on the admin listener when config.json sets one (issue 28).
            admin = int(eff.get("admin_port", -1))
            scrape = admin if admin > 0 else http
            drain = float(eff["drain_grace_seconds"])
            c.expect("max_connection_age_seconds" in config and 30 <= int(config["max_connection_age_seconds"]) <= 600,
                     f"{where} config.json sets max_connection_age_seconds (30..600 s) so gRPC clients rebalance")

            ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
            c.equal(ports.get("grpc"), grpc, f"{where} containerPort grpc = server gRPC port")
            c.equal(ports.get("http"), http, f"{where} containerPort http = server HTTP port")
            if admin > 0:
                c.equal(ports.get("admin"), admin, f"{where} containerPort admin = --admin_port")
            for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = ctr.get(probe_name, {})
                c.expect("grpc" in probe, f"{where} {probe_name} is a native gRPC probe")
                c.equal(probe.get("grpc", {}).get("port"), grpc, f"{where} {probe_name} port")
                c.equal(probe.get("grpc", {}).get("service", ""), "",
                        f"{where} {probe_name} asks the server's overall health (service \"\")")
            startup = ctr.get("startupProbe", {})
            c.expect(startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3) >= 60,
                     f"{where} startup probe allows at least 60 s for model load")
            ready = ctr.get("readinessProbe", {})
            c.expect(ready.get("periodSeconds", 10) * ready.get("failureThreshold", 3) <= 10,
                     f"{where} readiness notices a drain within 10 s")
            pre = ctr.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            c.expect(len(pre) == 2 and pre[0] == "sleep" and pre[1].isdigit(),
                     f"{where} preStop sleeps (endpoint propagation): {pre}")
            pre_stop = int(pre[1]) if len(pre) == 2 and pre[1].isdigit() else 0
            need = pre_stop + drain + DRAIN_SHUTDOWN_SECONDS + DRAIN_MARGIN_SECONDS
            c.expect(pod.get("terminationGracePeriodSeconds", 30) >= need,
                     f"{where} terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds')} >= "
                     f"preStop {pre_stop} + drain grace {drain} + shutdown {DRAIN_SHUTDOWN_SECONDS} + "
                     f"margin {DRAIN_MARGIN_SECONDS}")
            ann = dep["spec"]["template"]["metadata"].get("annotations", {})
            c.equal(ann.get("prometheus.io/port"), str(scrape), f"{where} prometheus.io/port")
            c.equal(ann.get("prometheus.io/path"), "/metrics", f"{where} prometheus.io/path")

            def selects(selector):
                return bool(selector) and all(pod_labels.get(k) == v for k, v in selector.items())
            services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"
                        and o["spec"].get("selector", {}).get("app.kubernetes.io/name") == "abcd"}
            http_svc = [s for s in services.values() if s["spec"].get("clusterIP") != "None"]
            grpc_svc = [s for s in services.values() if s["spec"].get("clusterIP") == "None"]
            c.expect(len(http_svc) == 1 and len(grpc_svc) == 1, f"{where} one ClusterIP and one headless Service")
            for svc, port_name, number in ((http_svc, "http", http), (grpc_svc, "grpc", grpc)):
                if not svc:
                    continue
                spec = svc[0]["spec"]
                c.expect(selects(spec["selector"]), f"{where} Service {svc[0]['metadata']['name']} selects the pods")
                c.expect(len(spec["ports"]) == 1 and spec["ports"][0]["targetPort"] in (port_name, number)
                         and spec["ports"][0]["port"] == number,
                         f"{where} Service {svc[0]['metadata']['name']} port {number} -> {port_name}")
            if grpc_svc:
                c.expect(grpc_svc[0]["spec"]["ports"][0].get("appProtocol") in ("kubernetes.io/h2c", "grpc"),
                         f"{where} headless gRPC Service declares HTTP/2 (appProtocol)")
            if http_svc:
                c.equal(http_svc[0]["spec"].get("type", "ClusterIP"), "ClusterIP", f"{where} HTTP Service type")

            monitor = find(objects, "PodMonitor")
            c.expect(selects(monitor["spec"]["selector"]["matchLabels"]), f"{where} PodMonitor selects the pods")
            for ep in monitor["spec"]["podMetricsEndpoints"]:
                c.expect(ep["port"] in ports and ports[ep["port"]] == scrape,
                         f"{where} PodMonitor scrapes the admin (else HTTP) port")
                c.equal(ep.get("path", "/metrics"), "/metrics", f"{where} PodMonitor path")

            hpa = find(objects, "HorizontalPodAutoscaler")
            pdb = find(objects, "PodDisruptionBudget")
            c.equal((hpa["spec"]["scaleTargetRef"]["kind"], hpa["spec"]["scaleTargetRef"]["name"]),
                    ("Deployment", dep["metadata"]["name"]), f"{where} HPA scales the Deployment")
            c.expect("replicas" not in dep["spec"], f"{where} the Deployment leaves replicas to the HPA")
            c.expect(hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["maxReplicas"] >= hpa["spec"]["minReplicas"],
                     f"{where} HPA min >= 2 <= max")
            pods_metrics = [m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
            c.expect(pods_metrics, f"{where} HPA scales on a Pods metric")
            hpa_metric = pods_metrics[0]["metric"]["name"] if pods_metrics else None
            c.equal(hpa_metric, "abcd_waiting_requests", f"{where} HPA metric")
            if pods_metrics:
                target = float(pods_metrics[0]["target"]["averageValue"])
                c.expect(0 < target < float(eff["max_waiting_requests"]),
                         f"{where} HPA target {target} waiting/pod is below max_waiting_requests "
                         f"{eff['max_waiting_requests']} (scale before refusing)")
            c.expect(selects(pdb["spec"]["selector"]["matchLabels"]), f"{where} PDB selects the pods")
            c.expect(pdb["spec"].get("maxUnavailable", 0) < hpa["spec"]["minReplicas"],
                     f"{where} PDB leaves at least one pod serving")
            exposed = [r["name"]["as"] for r in rules]
            c.expect(hpa_metric in exposed, f"{where} prometheus-adapter exposes the HPA metric {hpa_metric}")
            for r in rules:
                series = re.match(r"(\w+)", r["seriesQuery"]).group(1)
                c.expect(re.search(r["name"]["matches"], series), f"adapter rule name.matches {series}")
                c.expect({"namespace", "pod"} <= set(r["resources"]["overrides"]),
                         "adapter rule maps namespace and pod (a Pods metric)")

            psc, csc = pod.get("securityContext", {}), ctr.get("securityContext", {})
            c.expect(psc.get("runAsNonRoot") is True and psc.get("runAsUser") == image_uid,
                     f"{where} pod runs as non-root uid {image_uid} (the image's USER)")
            c.equal(psc.get("seccompProfile", {}).get("type"), "RuntimeDefault", f"{where} seccomp")
            c.expect(csc.get("readOnlyRootFilesystem") is True, f"{where} read-only root filesystem")
            c.expect(csc.get("allowPrivilegeEscalation") is False, f"{where} no privilege escalation")
            c.expect(csc.get("capabilities", {}).get("drop") == ["ALL"] and not csc["capabilities"].get("add"),
                     f"{where} all capabilities dropped")
            c.expect(pod.get("automountServiceAccountToken") is False, f"{where} no API token mounted")
            c.expect("/tmp" in mounts and "emptyDir" in volumes.get(mounts["/tmp"]["name"], {}),
                     f"{where} writable /tmp (emptyDir) beside the read-only root")
            port_dir = os.path.dirname(entrypoint_port_file(df) or "")
            c.expect(port_dir in mounts and "emptyDir" in volumes.get(mounts[port_dir]["name"], {}),
                     f"{where} the ENTRYPOINT's --port_file is on a writable emptyDir ({port_dir})")

            models = argmap.get("models", "").split(",")
            c.expect(models and all(m.startswith("/opt/abcd/models/") and os.path.basename(m) in bundled
                                    for m in models),
                     f"{where} models {models} are bundled in the image")
            weights = sum(os.path.getsize(os.path.join(map_image_path(m, root), "model.safetensors"))
                          for m in models if os.path.isdir(map_image_path(m, root)))
            res = ctr.get("resources", {})
            c.expect("cpu" in res.get("requests", {}) and "memory" in res.get("requests", {}),
                     f"{where} CPU and memory requests")
            needed = len(models) * float(eff["state_budget_mb"]) + weights / 2**20 + 256
            limit = mib(res.get("limits", {}).get("memory", "0"))
            c.expect(limit >= needed, f"{where} memory limit {limit:.0f} MiB >= {len(models)} models x "
                     f"state_budget_mb {eff['state_budget_mb']} + weights + 256 MiB = {needed:.0f} MiB")
            gpus = res.get("limits", {}).get("nvidia.com/gpu")
            if overlay == "gpu":
                c.expect(gpus is not None and int(gpus) >= 1, f"{where} requests nvidia.com/gpu")
                c.expect(any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])),
                         f"{where} tolerates the GPU node taint")
            else:
                c.expect(gpus is None, f"{where} requests no GPU")

            # The pod's exact command and ConfigMap, as a real server.
            config_file = os.path.join(root, f"config-{overlay}.json")
            with open(config_file, "w", encoding="utf-8") as f:
                f.write(config_text)
            argv = [map_image_path(a, root) for a in ctr["command"]]
            for n, v in flag_pairs(args):
                argv += [f"--{n}", config_file if n == "config" else map_image_path(v, root)]
            with LiveServer(argv) as server:
                client = os.path.join(os.path.dirname(argv[0]), "abcd-client")
                out = subprocess.run([client, "health", "--target", f"127.0.0.1:{server.grpc_port}"],
                                     capture_output=True, text=True, timeout=30)
                c.expect(out.returncode == 0 and out.stdout.strip() == "SERVING",
                         f"{where} grpc.health.v1 Check(service \"\") -> SERVING (the kubelet's probe)")
                c.equal(server.http("/readyz")[0], 200, f"{where} /readyz")
                status, body = server.http("/v1/models")
                got = sorted(m["id"] for m in json.loads(body)["data"]) if status == 200 else None
                c.equal(got, sorted(os.path.basename(m) for m in models), f"{where} the ConfigMap's models load")
                status, text = server.http("/metrics")
                c.equal(status, 200, f"{where} /metrics")
                catalogue = parse_exposition(text)
                rc, took = server.terminate(drain + 10)
                c.equal(rc, 0, f"{where} SIGTERM drain exits 0")
                logs = server.logs()
                m = re.search(r"event=draining .*grace_seconds=(\S+)", logs)
                c.expect(m and float(m.group(1)) == drain,
                         f"{where} the server drains with the configured grace {drain}: {m and m.group(0)}")
                c.expect(took < drain + DRAIN_SHUTDOWN_SECONDS + DRAIN_MARGIN_SECONDS,
                         f"{where} idle drain finished in {took:.1f} s")

    if catalogue:
        c.equal(catalogue.get("abcd_waiting_requests", {}).get("type"), "gauge",
                "abcd_waiting_requests (HPA/adapter) is a gauge the server exports")
        for r in rules:
            series = re.match(r"(\w+)", r["seriesQuery"]).group(1)
            c.expect(series in catalogue, f"adapter series {series} is exported by the server")


# ---- compose, Grafana, PromQL ----------------------------------------------------------------

def check_compose(ctx, c):
    compose_dir = ctx.path("deploy", "compose")
    compose = load_yaml(os.path.join(compose_dir, "compose.yaml"))
    flags = set(ctx.server_flags())
    defaults = ctx.server_defaults()
    df = Dockerfile(ctx.path("Dockerfile"))
    services = compose["services"]
    c.expect({"abcd", "prometheus", "grafana"} <= set(services), f"services: {sorted(services)}")
    abcd = services["abcd"]
    replicas = abcd.get("deploy", {}).get("replicas", 1)
    c.equal(replicas, 2, "abcd replicas")
    build = abcd["build"]
    c.equal(os.path.realpath(os.path.join(compose_dir, build["context"])), os.path.realpath(ctx.source),
            "build context is the repository root")
    c.expect(os.path.isfile(os.path.join(compose_dir, build["context"], build.get("dockerfile", "Dockerfile"))),
             "the compose build uses the repository Dockerfile")
    c.equal(interpolate_compose(build["args"]["VARIANT"]), "cpu", "default variant")
    c.expect("container_name" not in abcd, "no container_name (replicas need distinct names)")

    command = [interpolate_compose(a) for a in abcd["command"]]
    for n, _ in flag_pairs(command):
        c.expect(n in flags, f"compose command flag --{n} is a server flag")
    argmap = dict(flag_pairs(command))
    mounts = {}
    for v in abcd.get("volumes", []):
        src, dst = v.split(":")[:2]
        mounts[dst] = os.path.normpath(os.path.join(compose_dir, src))
    config_src = mounts.get(argmap.get("config"))
    c.expect(config_src and os.path.isfile(config_src), f"--config {argmap.get('config')} is mounted from the repo")
    c.equal(config_src, ctx.path("deploy/k8s/base/config.json"),
            "compose runs the Kubernetes base's config.json (one source of server settings)")
    config = json.loads(read(config_src)) if config_src and os.path.isfile(config_src) else {}
    eff = effective_config(defaults, config, command)
    grpc, http = int(eff["grpc_port"]), int(eff["http_port"])
    container_ports = {}
    for p in abcd["ports"]:
        host, _, container = p.rpartition(":")
        span = re.search(r"(\d+)(?:-(\d+))?$", host)
        width = int(span.group(2) or span.group(1)) - int(span.group(1)) + 1
        container_ports[int(container)] = width
    c.equal(set(container_ports), {grpc, http}, "published container ports = the server's ports")
    c.expect(all(w >= replicas for w in container_ports.values()), "one host port per replica")
    grace = seconds(abcd.get("stop_grace_period", "10s"))
    c.expect(grace >= eff["drain_grace_seconds"] + DRAIN_SHUTDOWN_SECONDS + DRAIN_MARGIN_SECONDS,
             f"stop_grace_period {grace}s covers the drain grace {eff['drain_grace_seconds']}s")
    image_user = df.stages[-1].all("USER")[-1].args
    c.equal(str(abcd.get("user")), image_user, "compose user = the image's USER")
    c.expect(abcd.get("read_only") is True and "/tmp" in abcd.get("tmpfs", []), "read-only root, tmpfs /tmp")
    port_dir = os.path.dirname(entrypoint_port_file(df) or "")
    c.expect(port_dir in abcd.get("tmpfs", []) and "entrypoint" not in abcd and "healthcheck" not in abcd,
             f"the image's ENTRYPOINT, HEALTHCHECK and --port_file ({port_dir}, a tmpfs) are kept")
    c.equal(abcd.get("cap_drop"), ["ALL"], "capabilities dropped")

    redis = services.get("redis")
    c.expect(redis is not None, "a redis service (the session store)")
    if redis:
        c.expect(re.fullmatch(r"redis:7\.\d+\.\d+", redis["image"]), f"redis image pinned: {redis['image']}")
        c.expect(redis.get("read_only") is True and redis.get("cap_drop") == ["ALL"],
                 "redis: read-only root, capabilities dropped")
        c.expect(not redis.get("ports"), "redis is not published on the host")
        store = argmap.get("session_store")
        if store is not None:
            c.expect(re.fullmatch(r"redis://redis:6379(/\d+)?", store),
                     f"abcd --session_store names the redis service: {store}")
            c.expect("redis" in abcd.get("depends_on", []), "abcd depends_on redis")
    for name in ("prometheus", "grafana"):
        image = services[name]["image"]
        c.expect(re.search(r":v?\d+\.\d+\.\d+$", image), f"{name} image pinned: {image}")
    prom = services["prometheus"]
    prom_mounts = {v.split(":")[1]: os.path.normpath(os.path.join(compose_dir, v.split(":")[0]))
                   for v in prom["volumes"]}
    prom_config_path = next((p for d, p in prom_mounts.items() if d.endswith("prometheus.yml")), None)
    c.expect(prom_config_path and os.path.isfile(prom_config_path), "prometheus.yml is mounted from the repo")
    prom_config = load_yaml(prom_config_path)
    jobs = {j["job_name"]: j for j in prom_config["scrape_configs"]}
    job = jobs.get("abcd", {})
    c.equal(job.get("metrics_path", "/metrics"), "/metrics", "Prometheus metrics_path")
    sd = job.get("dns_sd_configs", [{}])[0]
    c.expect("abcd" in sd.get("names", []) and sd.get("type") == "A",
             "Prometheus discovers every replica of the compose service `abcd` by DNS")
    c.equal(sd.get("port"), http, "Prometheus scrapes the HTTP port")
    c.expect(any(p.endswith(":9090") for p in prom["ports"]), "Prometheus listens on 9090")

    graf = services["grafana"]
    graf_mounts = {v.split(":")[1]: os.path.normpath(os.path.join(compose_dir, v.split(":")[0]))
                   for v in graf["volumes"]}
    prov = graf_mounts.get("/etc/grafana/provisioning")
    c.expect(prov and os.path.isdir(prov), "Grafana provisioning is mounted from the repo")
    datasources = load_yaml(os.path.join(prov, "datasources", "prometheus.yaml"))["datasources"]
    c.equal(datasources[0]["url"], "http://prometheus:9090", "Grafana datasource = the prometheus service")
    providers = load_yaml(os.path.join(prov, "dashboards", "abcd.yaml"))["providers"]
    dash_dir = graf_mounts.get(providers[0]["options"]["path"])
    c.expect(dash_dir and os.path.isfile(os.path.join(dash_dir, "abcd.json")),
             "the dashboard provider's path holds deploy/grafana/dashboards/abcd.json")
    home = graf.get("environment", {}).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH", "")
    c.expect(dash_dir and home.startswith(providers[0]["options"]["path"])
             and os.path.isfile(os.path.join(dash_dir, os.path.basename(home))), "Grafana home dashboard")
    dashboard = json.loads(read(os.path.join(dash_dir, "abcd.json")))
    ds_var = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    c.expect(ds_var and ds_var[0]["query"] == datasources[0]["type"],
             "the dashboard's datasource variable matches the provisioned type")

    # One model list everywhere: the image's CMD, the compose default and the Kubernetes ConfigMap.
    cmd_models = dict(flag_pairs(df.stages[-1].all("CMD")[-1].exec_form())).get("models")
    k8s_models = [o for o in render(ctx, "deploy/k8s/base") if o["kind"] == "ConfigMap"][0]["data"].get("models")
    c.equal(argmap.get("models"), cmd_models, "compose's default models = the image's CMD models")
    c.equal(k8s_models, cmd_models, "the Kubernetes ConfigMap's models = the image's CMD models")

    # The compose command on the emulated image, config from the mounted file.
    with temp_dir() as root:
        emulate_image(ctx, df, root)
        entry = df.stages[-1].all("ENTRYPOINT")[-1].exec_form()
        argv = [map_image_path(a, root) for a in entry]
        for n, v in flag_pairs(command):
            argv += [f"--{n}", config_src if n == "config" else map_image_path(v, root)]
        with LiveServer(argv) as server:
            status, body = server.http("/v1/models")
            want = sorted(os.path.basename(m) for m in argmap["models"].split(","))
            got = sorted(m["id"] for m in json.loads(body)["data"]) if status == 200 else None
            c.equal(got, want, "the compose command serves its models")
            c.equal(server.terminate(eff["drain_grace_seconds"] + 10)[0], 0, "compose replica drains on SIGTERM")


def dashboard_panels(dashboard):
    out = []
    for p in dashboard.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def dashboard_expressions(dashboard):
    exprs = []
    for p in dashboard_panels(dashboard):
        for t in p.get("targets", []):
            exprs.append(t["expr"])
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
            exprs.append(m.group(1) if m else q)
    return exprs


def check_grafana(ctx, c):
    path = ctx.path("deploy", "grafana", "dashboards", "abcd.json")
    dashboard = json.loads(read(path))
    c.expect(dashboard.get("uid") and dashboard.get("title") and dashboard.get("schemaVersion", 0) >= 36,
             "dashboard uid, title, schemaVersion")
    panels = dashboard_panels(dashboard)
    ids = [p["id"] for p in panels]
    c.equal(len(ids), len(set(ids)), "panel ids are unique")
    boxes = []
    for p in panels:
        g = p.get("gridPos", {})
        c.expect({"h", "w", "x", "y"} <= set(g) and g["x"] + g["w"] <= 24, f"panel {p.get('title')} gridPos")
        for other in boxes:
            overlap = (g["x"] < other["x"] + other["w"] and other["x"] < g["x"] + g["w"]
                       and g["y"] < other["y"] + other["h"] and other["y"] < g["y"] + g["h"])
            c.expect(not overlap, f"panel {p.get('title')} does not overlap another")
        boxes.append(g)
        if p["type"] != "row":
            c.equal(p.get("datasource", {}).get("uid"), "${datasource}", f"panel {p['title']} datasource")
            c.expect(p.get("targets"), f"panel {p['title']} has queries")
    exprs = dashboard_expressions(dashboard)
    joined = "\n".join(exprs)
    for pattern, what in (
            (r"rate\(abcd_generated_tokens_total", "throughput (generated tokens/s)"),
            (r"histogram_quantile\([^\n]*abcd_time_to_first_token_seconds_bucket", "TTFT percentiles"),
            (r"histogram_quantile\([^\n]*abcd_inter_token_latency_seconds_bucket", "ITL percentiles"),
            (r"abcd_running_sequences", "running sequences"),
            (r"abcd_waiting_requests", "waiting requests"),
            (r"abcd_state_bytes_in_use", "state bytes")):
        c.expect(re.search(pattern, joined), f"the dashboard shows {what}")
    catalogue = live_metrics(ctx)
    for expr in exprs:
        for name in metric_names_in(expr):
            c.expect(name in catalogue, f"dashboard metric {name} is exported by the server")
    families = {re.sub(r"_(bucket|sum|count)$", "", n) if v["type"] == "histogram" else n
                for n, v in catalogue.items() if n.startswith("abcd_")}
    used = {re.sub(r"_(bucket|sum|count)$", "", n) for e in exprs for n in metric_names_in(e)}
    c.expect(families <= used, f"every exported family is on the dashboard: missing {sorted(families - used)}")


def grafana_to_promql(expr):
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def check_promql(ctx, c):
    if not node_tools(ctx):
        print("deploy.promql: npm packages not installed (deploy.npm_ci); skipped")
        return SKIP
    dashboard = json.loads(read(ctx.path("deploy", "grafana", "dashboards", "abcd.json")))
    exprs = [grafana_to_promql(e) for e in dashboard_expressions(dashboard)]
    adapter = load_yaml(ctx.path("deploy/k8s/prometheus-adapter/values.yaml"))
    for r in adapter["rules"]["custom"]:
        series = re.match(r"(\w+)", r["seriesQuery"]).group(1)
        exprs.append(r["seriesQuery"])
        exprs.append(r["metricsQuery"].replace("<<.Series>>", series)
                     .replace("<<.LabelMatchers>>", 'namespace="abcd",pod=~"abcd-.*"')
                     .replace("<<.GroupBy>>", "pod"))
    catalogue = live_metrics(ctx)
    results = json.loads(run_node(ctx, "promql.mjs", exprs + ["sum(rate(abcd_x[1m])"]).stdout)
    control = results.pop()
    c.expect(control["errors"], "the parser reports a syntax error (control)")
    for r in results:
        expr = r["expr"]
        c.expect(not r["errors"], f"PromQL parses: {expr}: {r['errors']}")
        parsed = {s["metric"] for s in r["selectors"]}
        c.equal(parsed, metric_names_in(expr), f"parser and regex agree on the metrics of {expr}")
        for s in r["selectors"]:
            info = catalogue.get(s["metric"])
            if not c.expect(info, f"{s['metric']} is exported by the server ({expr})"):
                continue
            known = info["labels"] | TARGET_LABELS | ({"le"} if s["metric"].endswith("_bucket") else set())
            c.expect(set(s["labels"]) <= known, f"{s['metric']} has labels {s['labels']} ({expr})")
            cumulative = info["type"] in ("counter", "histogram")
            if cumulative:
                c.expect(s["range"] and s["function"] in ("rate", "increase", "irate"),
                         f"counter {s['metric']} is read through rate()/increase() ({expr})")
            else:
                c.expect(s["function"] not in ("rate", "increase", "irate"),
                         f"gauge {s['metric']} is not rate()d ({expr})")
        for g in r["groupings"]:
            known = set(TARGET_LABELS)
            for m in g["metrics"]:
                known |= catalogue.get(m, {}).get("labels", set())
                known |= {"le"} if m.endswith("_bucket") else set()
            c.expect(set(g["labels"]) <= known, f"grouping labels {g['labels']} exist ({expr})")
        if "histogram_quantile" in expr:
            c.expect(any("le" in g["labels"] for g in r["groupings"]),
                     f"histogram_quantile keeps the le label ({expr})")


def check_shellcheck(ctx, c):
    tool = shutil.which("shellcheck")
    if not tool:
        print("deploy.shellcheck: shellcheck not installed; skipped")
        return SKIP
    scripts = [ctx.path(p) for p in ("deploy/docker/runtime-packages.sh", "deploy/tools/npm-ci.sh",
                                     "deploy/scripts/setup.sh", "deploy/scripts/docker_smoke.sh",
                                     "deploy/scripts/gpu_check.sh")]
    out = subprocess.run([tool] + scripts, capture_output=True, text=True, timeout=60)
    print(out.stdout, end="")
    c.equal(out.returncode, 0, "shellcheck finds nothing in the deployment scripts")


CHECKS = {
    "dockerfile": check_dockerfile,
    "dockerfile_lint": check_dockerfile_lint,
    "docker_image": check_docker_image,
    "k8s_render": check_k8s_render,
    "k8s_schema": check_k8s_schema,
    "contract": check_contract,
    "compose": check_compose,
    "grafana": check_grafana,
    "promql": check_promql,
    "shellcheck": check_shellcheck,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    args = parser.parse_args()
    ctx = Context(args.source_dir, args.build_dir)
    c = Check(f"deploy.{args.check}")
    try:
        result = CHECKS[args.check](ctx, c)
    except AssertionError as e:
        c.expect(False, str(e))
        result = None
    if result == SKIP:
        return SKIP
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
