// Parses PromQL expressions with Prometheus' own grammar (npm @prometheus-io/lezer-promql, the
// parser behind the Prometheus and Grafana query editors) and reports what they reference.
//
//   node deploy/tools/promql.mjs EXPRESSIONS.json    (a JSON array of strings; - for stdin)
//
// Prints a JSON array, one entry per expression:
//   {"expr": ..., "errors": ["syntax error at 12: ..."],
//    "selectors": [{"metric": "abcd_x", "labels": ["status"],      // vector selectors, with
//                   "range": true, "function": "rate"}],            // [range] and enclosing call
//    "groupings": [{"labels": ["le"], "metrics": ["abcd_x_bucket"]}]}  // by/without (...)
// Grafana macros ($__rate_interval, $var) must be substituted by the caller.
import { readFileSync } from "node:fs";
import { parser } from "@prometheus-io/lezer-promql";

function text(expr, node) {
  return expr.slice(node.from, node.to);
}

function unquote(literal) {
  return JSON.parse(literal.startsWith("'") ? `"${literal.slice(1, -1)}"` : literal);
}

function analyse(expr) {
  const tree = parser.parse(expr);
  const result = { expr, errors: [], selectors: [], groupings: [] };
  tree.iterate({
    enter(ref) {
      if (ref.type.isError) {
        result.errors.push(`syntax error at ${ref.from}: ...${expr.slice(Math.max(0, ref.from - 20), ref.from + 20)}`);
      }
    },
  });
  const metricsUnder = (node) => {
    const names = [];
    const cursor = node.cursor();
    const end = node.to;
    do {
      if (cursor.from >= end) break;
      if (cursor.name === "VectorSelector") names.push(selector(cursor.node).metric);
    } while (cursor.next());
    return names.filter((n) => n);
  };
  const selector = (node) => {
    let metric = "";
    const labels = [];
    const identifier = node.getChild("Identifier");
    if (identifier) metric = text(expr, identifier);
    const matchers = node.getChild("LabelMatchers");
    if (matchers) {
      for (const m of matchers.getChildren("UnquotedLabelMatcher")) {
        const label = text(expr, m.getChild("LabelName"));
        const value = m.getChild("StringLiteral");
        if (label === "__name__" && value && m.getChild("MatchOp")?.getChild("EqlSingle")) {
          metric = unquote(text(expr, value));
        } else {
          labels.push(label);
        }
      }
    }
    const range = node.parent?.name === "MatrixSelector";
    let fn = "";
    for (let p = node.parent; p; p = p.parent) {
      if (p.name === "FunctionCall") {
        fn = text(expr, p.getChild("FunctionIdentifier"));
        break;
      }
    }
    return { metric, labels, range, function: fn };
  };
  tree.iterate({
    enter(ref) {
      if (ref.name === "VectorSelector") result.selectors.push(selector(ref.node));
      if (ref.name === "AggregateExpr") {
        const modifier = ref.node.getChild("AggregateModifier");
        const grouping = modifier?.getChild("GroupingLabels");
        if (grouping) {
          result.groupings.push({
            labels: grouping.getChildren("LabelName").map((l) => text(expr, l)),
            metrics: metricsUnder(ref.node),
          });
        }
      }
    },
  });
  return result;
}

const input = process.argv[2] && process.argv[2] !== "-" ? process.argv[2] : 0;
const expressions = JSON.parse(readFileSync(input, "utf8"));
console.log(JSON.stringify(expressions.map(analyse), null, 1));
