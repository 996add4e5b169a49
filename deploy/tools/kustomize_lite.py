#!/usr/bin/env python3
"""kustomize_lite: renders deploy/k8s without kustomize or kubectl.

    deploy/tools/kustomize_lite.py build deploy/k8s/overlays/cpu          # YAML, like `kubectl kustomize`
    deploy/tools/kustomize_lite.py build deploy/k8s/overlays/cpu --json   # a JSON array of objects

This is a SUBSET of kustomize (v5 semantics), just what deploy/k8s uses, so the manifests can be
rendered and checked on a machine with no kubectl. Anything outside the subset is an error, never
silently ignored. Supported kustomization fields:

  resources           YAML files and directories holding a kustomization.yaml (recursively)
  configMapGenerator  name, files (`path` or `key=path`), literals (`key=value`), behavior
                      (create, merge, replace), options (labels, annotations,
                      disableNameSuffixHash); the name gets kustomize's content-hash suffix and
                      references from pod specs (volumes, env, envFrom) are renamed to match
  generatorOptions    labels, annotations, disableNameSuffixHash
  labels              pairs, includeTemplates (includeSelectors must be false)
  images              name, newName, newTag, digest
  patches             JSON 6902 patches (inline `patch` or `path`) with a `target` of group,
                      version, kind, name (regular expression), namespace. Strategic-merge
                      patches are not supported.

Not supported: namePrefix/nameSuffix, namespace, commonLabels, commonAnnotations, replicas,
secretGenerator, components, replacements, helmCharts, remote resources. When kubectl is
installed, the deploy.k8s_render check renders every overlay with both and requires identical
objects, so this subset cannot drift from real kustomize.

Needs PyYAML (Debian: python3-yaml).
"""

import argparse
import copy
import hashlib
import json
import os
import re
import sys

import yaml

SUPPORTED_FIELDS = {
    "apiVersion", "kind", "resources", "configMapGenerator", "generatorOptions", "labels",
    "images", "patches",
}
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")

# kustomize's legacy output order (api/resid/gvk.go); other kinds sort between, by
# group/version/kind.
ORDER_FIRST = [
    "Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount",
    "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap",
    "Secret", "Endpoints", "Service", "LimitRange", "PriorityClass", "PersistentVolume",
    "PersistentVolumeClaim", "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget",
]
ORDER_LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
TEMPLATE_KINDS = {"Deployment", "ReplicaSet", "DaemonSet", "StatefulSet", "Job"}


class KustomizeError(Exception):
    pass


class Resource:
    """One object plus what the build needs to remember about it."""

    def __init__(self, obj, origin, generated=False, hash_suffix=False):
        self.obj = obj
        self.origin = origin
        self.generated = generated
        self.hash_suffix = hash_suffix
        self.original_name = obj.get("metadata", {}).get("name")

    def gvk(self):
        api = self.obj.get("apiVersion", "")
        group, _, version = api.rpartition("/")
        return group, version, self.obj.get("kind", "")

    def ident(self):
        group, _, kind = self.gvk()
        meta = self.obj.get("metadata", {})
        return (group, kind, meta.get("namespace", ""), self.original_name)


def _load_yaml_documents(path):
    with open(path, encoding="utf-8") as f:
        try:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            raise KustomizeError(f"{path}: {e}") from e
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d or "apiVersion" not in d:
            raise KustomizeError(f"{path}: every document must be an object with apiVersion and kind")
        if d["kind"] == "List":
            raise KustomizeError(f"{path}: kind List is not supported")
    return docs


def _kustomization_file(directory):
    for name in KUSTOMIZATION_FILES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    raise KustomizeError(f"{directory}: no kustomization.yaml")


def _inside(root, path):
    root = os.path.realpath(root)
    path = os.path.realpath(path)
    return path == root or path.startswith(root + os.sep)


# ---- configMapGenerator ----------------------------------------------------------------------

def _config_map_data(directory, spec):
    data = {}
    for entry in spec.get("files", []) or []:
        key, sep, rel = entry.partition("=")
        if not sep:
            key, rel = os.path.basename(entry), entry
        path = os.path.join(directory, rel)
        if not _inside(directory, path):
            raise KustomizeError(f"{path}: file is outside the kustomization root {directory}")
        with open(path, "rb") as f:
            raw = f.read()
        try:
            data[key] = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise KustomizeError(f"{path}: binary files (binaryData) are not supported") from e
    for entry in spec.get("literals", []) or []:
        key, sep, value = entry.partition("=")
        if not sep:
            raise KustomizeError(f"literal {entry!r} is not key=value")
        if value[:1] in ("'", '"'):
            raise KustomizeError(f"literal {entry!r}: quoted values are not supported")
        data[key] = value
    for key in spec:
        if key not in {"name", "namespace", "behavior", "files", "literals", "options"}:
            raise KustomizeError(f"configMapGenerator {spec.get('name')}: {key} is not supported")
    return data


def _go_json_html_escape(text):
    # Go's json.Marshal escapes these; kustomize hashes Go's encoding.
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def config_map_hash(obj):
    """kustomize's name suffix: sha256 of {"data","kind","name":""} as Go encodes it, 10 chars."""
    encoded = {"data": obj.get("data", {}) or {}, "kind": "ConfigMap", "name": ""}
    if obj.get("binaryData"):
        encoded["binaryData"] = obj["binaryData"]
    text = _go_json_html_escape(
        json.dumps(encoded, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]
    return "".join({"0": "g", "1": "h", "3": "k", "a": "m", "e": "t"}.get(c, c) for c in digest)


def _apply_generators(directory, kustomization, resources):
    options = kustomization.get("generatorOptions", {}) or {}
    for key in options:
        if key not in {"labels", "annotations", "disableNameSuffixHash"}:
            raise KustomizeError(f"generatorOptions.{key} is not supported")
    for spec in kustomization.get("configMapGenerator", []) or []:
        name = spec.get("name")
        if not name:
            raise KustomizeError("configMapGenerator entry without a name")
        behavior = spec.get("behavior", "create")
        data = _config_map_data(directory, spec)
        local = spec.get("options", {}) or {}
        for key in local:
            if key not in {"labels", "annotations", "disableNameSuffixHash"}:
                raise KustomizeError(f"configMapGenerator {name}: options.{key} is not supported")
        labels = {**(options.get("labels") or {}), **(local.get("labels") or {})}
        annotations = {**(options.get("annotations") or {}), **(local.get("annotations") or {})}
        no_hash = bool(local.get("disableNameSuffixHash", options.get("disableNameSuffixHash")))
        existing = [r for r in resources
                    if r.obj.get("kind") == "ConfigMap" and r.original_name == name
                    and r.obj["metadata"].get("namespace", "") == spec.get("namespace", "")]
        if behavior == "create":
            if existing:
                raise KustomizeError(f"configMapGenerator {name}: already exists (use behavior merge)")
            meta = {"name": name}
            if spec.get("namespace"):
                meta["namespace"] = spec["namespace"]
            if labels:
                meta["labels"] = labels
            if annotations:
                meta["annotations"] = annotations
            obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
            resources.append(Resource(obj, directory, generated=True, hash_suffix=not no_hash))
        elif behavior in ("merge", "replace"):
            if len(existing) != 1 or not existing[0].generated:
                raise KustomizeError(f"configMapGenerator {name}: behavior {behavior} needs one "
                                     "generated ConfigMap of that name from a base")
            target = existing[0]
            target.obj["data"] = {**target.obj.get("data", {}), **data} if behavior == "merge" else data
            meta = target.obj["metadata"]
            if labels:
                meta["labels"] = {**meta.get("labels", {}), **labels}
            if annotations:
                meta["annotations"] = {**meta.get("annotations", {}), **annotations}
            if "disableNameSuffixHash" in local or "disableNameSuffixHash" in options:
                target.hash_suffix = not no_hash
        else:
            raise KustomizeError(f"configMapGenerator {name}: unknown behavior {behavior}")


# ---- JSON 6902 patches -----------------------------------------------------------------------

def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise KustomizeError(f"JSON pointer {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, tokens, path):
    node = doc
    for token in tokens:
        if isinstance(node, list):
            if not token.isdigit() or int(token) >= len(node):
                raise KustomizeError(f"patch path {path}: no element {token}")
            node = node[int(token)]
        elif isinstance(node, dict):
            if token not in node:
                raise KustomizeError(f"patch path {path}: missing {token}")
            node = node[token]
        else:
            raise KustomizeError(f"patch path {path}: {token} is inside a scalar")
    return node


def _json_patch(doc, operations, where):
    if not isinstance(operations, list):
        raise KustomizeError(f"{where}: only JSON 6902 patches (a list of operations) are supported")
    for op in operations:
        kind, path = op.get("op"), op.get("path")
        tokens = _pointer(path)
        if not tokens:
            raise KustomizeError(f"{where}: patching the whole document is not supported")
        parent = _walk(doc, tokens[:-1], path)
        last = tokens[-1]

        def get():
            return _walk(parent, [last], path)

        def put(value, insert):
            if isinstance(parent, list):
                if last == "-" and insert:
                    parent.append(value)
                    return
                if not last.isdigit() or int(last) > len(parent) - (0 if insert else 1):
                    raise KustomizeError(f"{where}: bad index in {path}")
                if insert:
                    parent.insert(int(last), value)
                else:
                    parent[int(last)] = value
            elif isinstance(parent, dict):
                if not insert and last not in parent:
                    raise KustomizeError(f"{where}: {path} does not exist")
                parent[last] = value
            else:
                raise KustomizeError(f"{where}: {path} is inside a scalar")

        def remove():
            value = get()
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]
            return value

        if kind == "add":
            put(copy.deepcopy(op["value"]), insert=True)
        elif kind == "replace":
            get()
            put(copy.deepcopy(op["value"]), insert=False)
        elif kind == "remove":
            remove()
        elif kind == "test":
            if get() != op["value"]:
                raise KustomizeError(f"{where}: test failed at {path}")
        elif kind in ("move", "copy"):
            source_tokens = _pointer(op["from"])
            value = _walk(doc, source_tokens, op["from"])
            if kind == "move":
                source_parent = _walk(doc, source_tokens[:-1], op["from"])
                if isinstance(source_parent, list):
                    del source_parent[int(source_tokens[-1])]
                else:
                    del source_parent[source_tokens[-1]]
            put(copy.deepcopy(value), insert=True)
        else:
            raise KustomizeError(f"{where}: unknown op {kind!r}")


def _matches(resource, target):
    group, version, kind = resource.gvk()
    for key in target:
        if key not in {"group", "version", "kind", "name", "namespace"}:
            raise KustomizeError(f"patch target field {key} is not supported")
    meta = resource.obj.get("metadata", {})
    checks = [("group", group), ("version", version), ("kind", kind),
              ("name", meta.get("name", "")), ("namespace", meta.get("namespace", ""))]
    return all(re.fullmatch(str(target[k]), value) for k, value in checks if k in target)


def _apply_patches(directory, kustomization, resources):
    for i, spec in enumerate(kustomization.get("patches", []) or []):
        for key in spec:
            if key not in {"patch", "path", "target"}:
                raise KustomizeError(f"patches[{i}].{key} is not supported")
        if "target" not in spec:
            raise KustomizeError(f"patches[{i}]: a target is required (no strategic-merge patches)")
        if "path" in spec:
            path = os.path.join(directory, spec["path"])
            if not _inside(directory, path):
                raise KustomizeError(f"{path}: patch is outside the kustomization root")
            with open(path, encoding="utf-8") as f:
                operations = yaml.safe_load(f)
        else:
            operations = yaml.safe_load(spec.get("patch", ""))
        matched = [r for r in resources if _matches(r, spec["target"])]
        if not matched:
            raise KustomizeError(f"patches[{i}]: target {spec['target']} matches no resource")
        for r in matched:
            _json_patch(r.obj, operations, f"{directory} patches[{i}]")


# ---- labels and images -----------------------------------------------------------------------

def _apply_labels(kustomization, resources):
    for spec in kustomization.get("labels", []) or []:
        for key in spec:
            if key not in {"pairs", "includeSelectors", "includeTemplates"}:
                raise KustomizeError(f"labels.{key} is not supported")
        if spec.get("includeSelectors"):
            raise KustomizeError("labels.includeSelectors: true is not supported")
        pairs = {str(k): str(v) for k, v in (spec.get("pairs") or {}).items()}
        for r in resources:
            r.obj.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
            if not spec.get("includeTemplates"):
                continue
            kind = r.obj.get("kind")
            spec_obj = r.obj.setdefault("spec", {})
            if kind in TEMPLATE_KINDS:
                templates = [spec_obj.setdefault("template", {})]
            elif kind == "CronJob":
                job = spec_obj.setdefault("jobTemplate", {})
                templates = [job, job.setdefault("spec", {}).setdefault("template", {})]
            else:
                if not spec_obj:
                    del r.obj["spec"]
                continue
            for t in templates:
                t.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)


def _split_image(image):
    name, digest, tag = image, None, None
    if "@" in name:
        name, digest = name.split("@", 1)
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    return name, tag, digest


def _containers(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for c in value:
                    if isinstance(c, dict):
                        yield c
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def _apply_images(kustomization, resources):
    for spec in kustomization.get("images", []) or []:
        for key in spec:
            if key not in {"name", "newName", "newTag", "digest"}:
                raise KustomizeError(f"images.{key} is not supported")
        for r in resources:
            for c in _containers(r.obj):
                if "image" not in c:
                    continue
                name, tag, digest = _split_image(c["image"])
                if name != spec["name"]:
                    continue
                name = spec.get("newName", name)
                if "digest" in spec:
                    c["image"] = f"{name}@{spec['digest']}"
                elif "newTag" in spec:
                    c["image"] = f"{name}:{spec['newTag']}"
                else:
                    c["image"] = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


# ---- build ---------------------------------------------------------------------------------

def _accumulate(directory, stack):
    directory = os.path.normpath(directory)
    if directory in stack:
        raise KustomizeError(f"{directory}: cycle in resources")
    path = _kustomization_file(directory)
    with open(path, encoding="utf-8") as f:
        kustomization = yaml.safe_load(f) or {}
    unknown = set(kustomization) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{path}: not supported by kustomize_lite: {', '.join(sorted(unknown))}")
    if kustomization.get("kind", "Kustomization") != "Kustomization":
        raise KustomizeError(f"{path}: kind must be Kustomization")

    resources = []
    for entry in kustomization.get("resources", []) or []:
        if "://" in entry or entry.startswith("github.com/"):
            raise KustomizeError(f"{path}: remote resource {entry} is not supported")
        target = os.path.join(directory, entry)
        if os.path.isdir(target):
            resources.extend(_accumulate(target, stack + [directory]))
        elif os.path.isfile(target):
            if not _inside(directory, target):
                raise KustomizeError(f"{target}: file is outside the kustomization root {directory}")
            resources.extend(Resource(d, target) for d in _load_yaml_documents(target))
        else:
            raise KustomizeError(f"{path}: resource {entry} not found")
    seen = set()
    for r in resources:
        if r.ident() in seen:
            raise KustomizeError(f"{path}: resource {r.ident()} is defined twice")
        seen.add(r.ident())

    # kustomize's order: generators, then patches, labels, images (builtin transformer order).
    _apply_generators(directory, kustomization, resources)
    _apply_patches(directory, kustomization, resources)
    _apply_labels(kustomization, resources)
    _apply_images(kustomization, resources)
    return resources


def _rename_config_map_refs(node, renames):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("configMap", "configMapKeyRef", "configMapRef") and isinstance(value, dict):
                if value.get("name") in renames:
                    value["name"] = renames[value["name"]]
            _rename_config_map_refs(value, renames)
    elif isinstance(node, list):
        for item in node:
            _rename_config_map_refs(item, renames)


def _sort_key(resource):
    group, version, kind = resource.gvk()
    if kind in ORDER_FIRST:
        rank = ORDER_FIRST.index(kind)
    elif kind in ORDER_LAST:
        rank = len(ORDER_FIRST) + 1 + ORDER_LAST.index(kind)
    else:
        rank = len(ORDER_FIRST)
    meta = resource.obj.get("metadata", {})
    # Within a rank kustomize compares Gvk.String(), "group_version_kind" ("~G"/"~V" if empty):
    # HorizontalPodAutoscaler (autoscaling) < PodMonitor (monitoring...) < NetworkPolicy.
    return (rank, group or "~G", version or "~V", kind, meta.get("namespace", ""),
            meta.get("name", ""))


def build(directory):
    """Renders the kustomization in `directory`; returns the list of objects."""
    resources = _accumulate(directory, [])
    renames = {}
    for r in resources:
        if r.hash_suffix:
            new = f"{r.original_name}-{config_map_hash(r.obj)}"
            renames[r.original_name] = new
            r.obj["metadata"]["name"] = new
    for r in resources:
        if not (r.obj.get("kind") == "ConfigMap"):
            _rename_config_map_refs(r.obj, renames)
    return [r.obj for r in sorted(resources, key=_sort_key)]


class _Dumper(yaml.SafeDumper):
    pass


def _str_representer(dumper, value):
    # Like kustomize's output: literal blocks for multi-line text, double quotes where a plain
    # scalar would read as another type ("8080", "true").
    style = None
    if "\n" in value:
        style = "|"
    elif dumper.resolve(yaml.ScalarNode, value, (True, False)) != "tag:yaml.org,2002:str":
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def to_yaml(objects):
    return "---\n".join(
        yaml.dump(o, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=4096)
        for o in objects)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="render a kustomization directory")
    b.add_argument("directory")
    b.add_argument("--json", action="store_true", help="print a JSON array instead of YAML")
    b.add_argument("-o", "--output", help="write here instead of stdout")
    args = parser.parse_args(argv)
    try:
        objects = build(args.directory)
    except (KustomizeError, OSError) as e:
        print(f"kustomize_lite: {e}", file=sys.stderr)
        return 1
    text = json.dumps(objects, indent=1) + "\n" if args.json else to_yaml(objects)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
