"""The deploy checks of what runs beside the image: the manifests' contract with the server, the
compose stack, the Grafana dashboard and its PromQL, and the deployment shell scripts.

Called by deploy_checks.py (`contract`, `compose`, `grafana`, `promql`, `shellcheck`); each
check takes the Context and the Check it reports to (deploylib.py).
"""

import json
import math
import os
import re
import shutil
import subprocess

from deploylib import (DRAIN_MARGIN_SECONDS, DRAIN_SHUTDOWN_SECONDS, OVERLAYS, SKIP,
                       TARGET_LABELS, KUBECTL_MISSING, Dockerfile, KubectlMissing, LiveServer,
                       emulate_image, entrypoint_port_file, find, flag_pairs, interpolate_compose, live_metrics,
                       load_yaml, map_image_path, metric_names_in, mib, node_tools,
                       parse_exposition, read, render, run_node, seconds, temp_dir)


def effective_config(defaults, config, args):
    eff = dict(defaults)
    eff.update(config)
    for name, value in flag_pairs(args):
        eff[name] = value
    return eff


def check_contract(ctx, c):
    if not shutil.which("kubectl"):
        raise KubectlMissing(KUBECTL_MISSING)  # every overlay is rendered with kubectl kustomize
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
    c.equal(argmap.get("models"), cmd_models, "compose's default models = the image's CMD models")
    if shutil.which("kubectl"):
        k8s_models = [o for o in render(ctx, "deploy/k8s/base")
                      if o["kind"] == "ConfigMap"][0]["data"].get("models")
        c.equal(k8s_models, cmd_models, "the Kubernetes ConfigMap's models = the image's CMD models")
    else:
        c.note(f"{KUBECTL_MISSING}: the Kubernetes ConfigMap's models not compared")

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
