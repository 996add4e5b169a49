// Lints a Dockerfile offline with dockerfile-utils (the validator behind the Docker language
// server used by editors): syntax, instruction arguments, flags, JSON forms, ports, durations,
// signals, duplicate stage names, multiple CMD/ENTRYPOINT/HEALTHCHECK, relative WORKDIR.
//
//   node deploy/tools/lint-dockerfile.mjs Dockerfile
//
// Prints one line per problem; exit status 1 when there is any warning or error.
import { readFileSync } from "node:fs";
import utils from "dockerfile-utils";

const path = process.argv[2];
const text = readFileSync(path, "utf8");
const diagnostics = utils.validate(text, {
  deprecatedMaintainer: utils.ValidationSeverity.ERROR,
  directiveCasing: utils.ValidationSeverity.ERROR,
  emptyContinuationLine: utils.ValidationSeverity.ERROR,
  instructionCasing: utils.ValidationSeverity.ERROR,
  instructionCmdMultiple: utils.ValidationSeverity.ERROR,
  instructionEntrypointMultiple: utils.ValidationSeverity.ERROR,
  instructionHealthcheckMultiple: utils.ValidationSeverity.ERROR,
  instructionJSONInSingleQuotes: utils.ValidationSeverity.ERROR,
  instructionWorkdirRelative: utils.ValidationSeverity.ERROR,
});
for (const d of diagnostics) {
  console.log(`${path}:${d.range.start.line + 1}:${d.range.start.character + 1}: ${d.message}`);
}
console.log(`${diagnostics.length} problem(s)`);
process.exit(diagnostics.length ? 1 : 0);
