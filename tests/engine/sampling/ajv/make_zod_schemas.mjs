// Writes tests/fixtures/json_schema/zod.json: JSON Schemas exactly as zod (npm, pinned in
// package-lock.json) emits them with z.toJSONSchema, one per shape a client of a structured-
// output API writes (formats, patterns, lengths, bounds, literals, unions, nullable and optional
// fields, records, arrays, discriminated unions, recursion through $defs/$ref).
// json_schema_keywords_test.cc compiles each, samples outputs and validates them (its own
// validator and ajv). Regenerate: cd tests/engine/sampling/ajv && npm ci && node make_zod_schemas.mjs
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { z } from "zod";

const shapes = {
  formats: z.object({
    id: z.uuid(),
    email: z.email(),
    at: z.iso.datetime(),
    day: z.iso.date(),
    time: z.iso.time(),
    ip: z.ipv4(),
  }),
  strings: z.object({
    name: z.string().min(1).max(12),
    code: z.string().regex(/^[A-Z]{2}-\d{3}$/),
    note: z.string().max(8).optional(),
    nick: z.string().max(6).nullable(),
  }),
  numbers: z.object({
    age: z.number().int().min(0).max(150),
    score: z.number().gt(0).lte(10),
    delta: z.number().gte(-5).lt(5),
    count: z.int().positive().max(1000),
  }),
  literals: z.object({
    kind: z.literal("point"),
    version: z.literal(2),
    mode: z.enum(["fast", "slow"]),
    flag: z.boolean(),
  }),
  unions: z.object({
    value: z.union([z.string().max(5), z.number(), z.boolean(), z.null()]),
    tagged: z.discriminatedUnion("type", [
      z.object({ type: z.literal("circle"), radius: z.number().min(0) }),
      z.object({ type: z.literal("square"), side: z.number().min(0), label: z.string().max(4) }),
    ]),
  }),
  collections: z.strictObject({
    tags: z.array(z.string().max(5)).min(1).max(3),
    scores: z.record(z.string().max(3), z.int().min(0).max(9)),
    pairs: z.array(z.object({ k: z.string().max(3), v: z.number() })).max(2),
  }),
};

// A recursive tree (z.lazy through a getter): $defs/$ref with a base case (children may be empty).
const Node = z.object({
  label: z.string().max(4),
  get children() {
    return z.array(Node).max(2);
  },
});
shapes.recursive = z.object({ root: Node });

const out = Object.entries(shapes).map(([name, schema]) => ({
  name,
  schema: z.toJSONSchema(schema),
}));
const file = fileURLToPath(new URL("../../../fixtures/json_schema/zod.json", import.meta.url));
writeFileSync(file, `${JSON.stringify(out, null, 1)}\n`);
console.log(`wrote ${out.length} zod schemas to ${file}`);
