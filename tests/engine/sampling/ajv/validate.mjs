// Validates constrained-decoding outputs with ajv (JSON Schema 2020-12) and ajv-formats:
// `node validate.mjs FILE`, FILE holding one {"schema": ..., "output": "<generated text>"} per
// line (json_schema_keywords_test.cc writes it). Prints every output that does not parse or
// does not validate, and exits 1 if there is one; 0 when all validate.
import { readFileSync } from "node:fs";
import Ajv2020Module from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;
const addFormats = addFormatsModule.default ?? addFormatsModule;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

const lines = readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l.length > 0);
const compiled = new Map();
let bad = 0;
for (const line of lines) {
  const { schema, output } = JSON.parse(line);
  const key = JSON.stringify(schema);
  if (!compiled.has(key)) compiled.set(key, ajv.compile(schema));
  const validate = compiled.get(key);
  let value;
  try {
    value = JSON.parse(output);
  } catch (e) {
    console.log(`does not parse: ${output}\n  schema: ${key}\n  ${e.message}`);
    ++bad;
    continue;
  }
  if (!validate(value)) {
    console.log(`invalid: ${output}\n  schema: ${key}\n  ${ajv.errorsText(validate.errors)}`);
    ++bad;
  }
}
console.log(`ajv: ${lines.length - bad} of ${lines.length} outputs validate`);
process.exit(bad === 0 ? 0 : 1);
