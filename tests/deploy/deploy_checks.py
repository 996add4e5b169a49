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
  k8s_render       every kustomization renders with `kubectl kustomize`; overlays keep every
                   base object and run their image; the redis overlay's Redis wiring
                   (Service, selectors, security, NetworkPolicy)         [skips without kubectl]
  k8s_schema       every rendered object against the Kubernetes/Prometheus-operator schemas,
                   unknown fields included (npm kubernetes-models) [skips without npm or kubectl]
  contract         manifests vs the server: flags, config keys, ports, probes, drain times,
                   security, resources, HPA/adapter metric; each overlay's exact command and
                   ConfigMap started as a real abcd-server (health, models, metrics, drain);
                   the redis overlay too once abcd-server has --session_store
                                                                         [skips without kubectl]
  compose          the compose stack: replicas, ports, config, stop grace, Redis, Prometheus
                   targets, Grafana provisioning; its command started as a real abcd-server
                   (without kubectl, the Kubernetes ConfigMap's model list is not compared)
  grafana          dashboard JSON: structure, required panels, every metric exported
  promql           every PromQL expression parsed with Prometheus' grammar (npm); metrics,
                   labels, rate() on counters, `le` in histogram_quantile    [skips without npm]
  shellcheck       the deployment shell scripts                        [skips without shellcheck]
Exit status: 0 pass, 1 fail, 77 skipped.
"""

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploylib import (OVERLAYS, SKIP, TARGET_LABELS, Check, Context, Dockerfile,  # noqa: E402
                       KUBECTL_MISSING, KubectlMissing, LiveServer, emulate_image,
                       entrypoint_port_file, find, flag_pairs, live_metrics, load_yaml, map_image_path, metric_names_in, node_tools,
                       parse_exposition, read, render, run_node, temp_dir)
from stack_checks import (check_compose, check_contract, check_grafana,  # noqa: E402
                          check_promql, check_shellcheck)



# ---- Dockerfile ------------------------------------------------------------------------------



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


def check_k8s_render(ctx, c):
    if not shutil.which("kubectl"):
        raise KubectlMissing(KUBECTL_MISSING)
    dirs = kustomizations(ctx)
    c.expect({"deploy/k8s/base", "deploy/k8s/overlays/cpu", "deploy/k8s/overlays/gpu"} <= set(dirs),
             f"kustomizations: {dirs}")
    base_kinds = None
    for d in dirs:
        try:
            objects = render(ctx, d)
        except AssertionError as e:
            c.expect(False, str(e))
            continue
        c.expect(objects and all(isinstance(o, dict) and "kind" in o and "name" in o.get("metadata", {})
                                 for o in objects), f"{d}: renders objects with a kind and a name")
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
    for overlay, tag in (("cpu", "cpu"), ("gpu", "cuda")):
        image = find(render(ctx, f"deploy/k8s/overlays/{overlay}"), "Deployment", "abcd")[
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
    if not shutil.which("kubectl"):
        raise KubectlMissing(KUBECTL_MISSING)
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
    except KubectlMissing as e:
        print(f"deploy.{args.check}: {e}; skipped")
        return SKIP
    except AssertionError as e:
        c.expect(False, str(e))
        result = None
    if result == SKIP:
        return SKIP
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
