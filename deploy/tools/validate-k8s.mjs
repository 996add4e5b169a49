// Validates Kubernetes objects offline against the API's OpenAPI schemas (npm kubernetes-models,
// plus @kubernetes-models/prometheus-operator for PodMonitor/ServiceMonitor).
//
//   node deploy/tools/validate-k8s.mjs OBJECTS.json     (a JSON array of objects; - for stdin)
//
// Two checks per object:
//   1. the schema validator (types, required fields, enums, formats such as int32/quantity);
//   2. unknown fields: the OpenAPI schemas allow extra properties (the API server prunes or,
//      with strict field validation, rejects them), so a misspelt field would pass (1). The
//      validator is run on a Proxy of the object that records every property it reads or
//      enumerates; a property it never touched is not in the schema.
// Exit status 0 when every object passes, 1 otherwise (each problem on its own line).
import { readFileSync } from "node:fs";

// apiVersion/kind -> module under node_modules. Fail closed: an unknown type is an error.
function modulePath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (group === "monitoring.coreos.com") {
    return `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`;
  }
  return group === "" ? `kubernetes-models/${version}/${kind}` : `kubernetes-models/${group}/${version}/${kind}`;
}

function tracked(value, path, seen) {
  if (value === null || typeof value !== "object") return value;
  return new Proxy(value, {
    get(target, key, receiver) {
      if (typeof key === "string") seen.add(`${path}\u0000${key}`);
      const child = Reflect.get(target, key, receiver);
      return typeof key === "string" ? tracked(child, `${path}/${key}`, seen) : child;
    },
    has(target, key) {
      if (typeof key === "string") seen.add(`${path}\u0000${key}`);
      return Reflect.has(target, key);
    },
    ownKeys(target) {
      seen.add(`${path}\u0000*`);
      return Reflect.ownKeys(target);
    },
  });
}

function unknownFields(value, path, seen, out) {
  if (value === null || typeof value !== "object") return;
  if (Array.isArray(value)) {
    value.forEach((item, i) => unknownFields(item, `${path}/${i}`, seen, out));
    return;
  }
  const all = seen.has(`${path}\u0000*`);
  for (const key of Object.keys(value)) {
    if (!all && !seen.has(`${path}\u0000${key}`)) out.push(`${path}/${key}`);
    unknownFields(value[key], `${path}/${key}`, seen, out);
  }
}

const input = process.argv[2] && process.argv[2] !== "-" ? process.argv[2] : 0;
const objects = JSON.parse(readFileSync(input, "utf8"));
let failures = 0;
for (const object of objects) {
  const name = `${object.kind}/${object.metadata?.name} (${object.apiVersion})`;
  let Model;
  try {
    const module = await import(modulePath(object.apiVersion, object.kind));
    Model = module[object.kind];
  } catch (error) {
    console.log(`FAIL ${name}: no schema for this type (${error.message.split("\n")[0]})`);
    failures++;
    continue;
  }
  const seen = new Set();
  const problems = [];
  try {
    Model.prototype.validate.call(tracked(object, "", seen));
  } catch (error) {
    problems.push(error.message);
  }
  const unknown = [];
  unknownFields(object, "", seen, unknown);
  for (const path of unknown) problems.push(`${path}: unknown field (not in the ${object.kind} schema)`);
  if (problems.length) {
    failures++;
    for (const p of problems) console.log(`FAIL ${name}: ${p}`);
  } else {
    console.log(`ok   ${name}`);
  }
}
console.log(`${objects.length - failures} valid, ${failures} invalid`);
process.exit(failures ? 1 : 0);
