//! Worked examples of the cost estimate. Each expected figure was computed by hand from
//! upstream's algorithm (cel-go `checker/cost.go`, Kubernetes `library/cost.go`, the schema
//! sizes of `SchemaDeclType`); the comment shows the sum. Where upstream's own
//! `TestCostEstimation` (apiextensions-apiserver `schema/cel/compilation_test.go`) has the same
//! schema and rule, the figure is the one it asserts.
//!
//! Sizes used below: an unbounded string holds 3,145,726 characters (3 MiB less `""`); a string
//! with `maxLength: n` holds 4n (bytes per character); an unbounded list holds
//! 3,145,726 / (smallest item + 1) items, an unbounded map 3,145,726 / (smallest value + 6).
//! `all` costs its range + 1 (result) + items × (2 (loop condition) + 1 (`&&`'s left) + body).

use serde_json::{Value, json};

use super::{Est, RULE_LIMIT, Site, estimate, over_budget};
use crate::cel::{compile, library};
use crate::status::Cause;

fn cost_at(schema: &Value, rule: &str, root: bool) -> u64 {
    let program = library::env().compile(rule).unwrap();
    let site = Site {
        schema,
        root,
        optional_old: false,
    };
    estimate(program.expression(), site)
}

fn cost(schema: Value, rule: &str) -> u64 {
    cost_at(&schema, rule, false)
}

fn array(items: Value, max_items: Option<u64>) -> Value {
    let mut a = json!({"type": "array", "items": items});
    if let Some(m) = max_items {
        a["maxItems"] = json!(m);
    }
    a
}

fn string(max_length: Option<u64>) -> Value {
    let mut s = json!({"type": "string"});
    if let Some(m) = max_length {
        s["maxLength"] = json!(m);
    }
    s
}

#[test]
fn rounding_and_saturation_follow_cel_go() {
    assert_eq!(Est::fixed(3_145_726).factor(0.1).max, 314_573);
    assert_eq!(Est::fixed(10).factor(0.1).max, 1);
    assert_eq!(Est::fixed(u64::MAX).factor(2.0).max, u64::MAX);
    assert_eq!(Est::fixed(u64::MAX).add(Est::fixed(1)).max, u64::MAX);
}

#[test]
fn all_over_lists_with_and_without_max_items() {
    let number = json!({"type": "number"});
    // 1,572,863 numbers (3,145,726 / 2): 1 + 1 + 1,572,863 × 3. Upstream: 4718591.
    assert_eq!(
        cost(array(number.clone(), None), "self.all(x, true)"),
        4_718_591
    );
    // 2 + 10 × 3. Upstream: 32.
    assert_eq!(cost(array(number, Some(10)), "self.all(x, true)"), 32);
    // 1,048,575 strings (3,145,726 / 3): 2 + 1,048,575 × 3. Upstream: 3145727.
    assert_eq!(
        cost(array(string(None), None), "self.all(x, true)"),
        3_145_727
    );
    // Objects with one required string `required`: 2 + 8 + 2 + 4 = 16 bytes, so 185,042
    // items: 2 + 185,042 × 3. Upstream: 555128.
    let object = json!({"type": "object", "required": ["required"], "properties": {
        "required": {"type": "string"}, "optional": {"type": "string"}}});
    assert_eq!(cost(array(object, None), "self.all(x, true)"), 555_128);
}

#[test]
fn all_over_maps() {
    let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    // 393,215 entries (3,145,726 / 8): 2 + 393,215 × 3. Upstream: 1179647.
    assert_eq!(cost(map, "self.all(k, true)"), 1_179_647);
    // Keys cost nothing to size (upstream gives map keys no length), values are strings:
    // body = x (1) + self[x] (3) + contains (0 × 314,573) = 4, so 2 + 393,215 × 7.
    // Upstream: 2752507; with maxProperties/maxLength 10: 2 + 10 × 7 = 72.
    let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    assert_eq!(cost(map, "self.all(x, x.contains(self[x]))"), 2_752_507);
    let map = json!({"type": "object", "maxProperties": 10,
        "additionalProperties": {"type": "string", "maxLength": 10}});
    assert_eq!(cost(map, "self.all(x, x.contains(self[x]))"), 72);
}

#[test]
fn string_functions_scale_with_max_length() {
    // contains: 1 (self) + ceil(3,145,726 / 10) × ceil(4 / 10). Upstream: 314574.
    assert_eq!(cost(string(None), "self.contains('test')"), 314_574);
    // maxLength 10 = 40 bytes: 1 + 4 × 1. Upstream: 5.
    assert_eq!(cost(string(Some(10)), "self.contains('test')"), 5);
    // startsWith costs a traversal of the prefix only: 1 + 1. Upstream: 2.
    assert_eq!(cost(string(None), "self.startsWith('test')"), 2);
    // + on strings: ceil(3,145,731 / 10) + 1, size() + 1, size("hello") 1, > 1.
    // Upstream: 314578; with maxLength 4: ceil(21 / 10) + 1 + 1 + 1 + 1 = 7.
    let rule = r#"size(self + "hello") > size("hello")"#;
    assert_eq!(cost(string(None), rule), 314_578);
    assert_eq!(cost(string(Some(4)), rule), 7);
    // Equality costs a traversal of the shorter side: 1 + ceil(1 / 10). Upstream: 2; with
    // maxLength 0 the shorter side is empty: 1.
    assert_eq!(cost(string(None), r#"self == "x""#), 2);
    assert_eq!(cost(string(Some(0)), r#"self == "x""#), 1);
}

#[test]
fn regex_matches_multiplies_string_and_pattern() {
    // ceil(3,145,727 / 10) × ceil(1 / 4) + 1. Upstream: 314574; maxLength 50:
    // ceil(201 / 10) × 1 + 1 = 22.
    assert_eq!(cost(string(None), r#"self.matches("x")"#), 314_574);
    assert_eq!(cost(string(Some(50)), r#"self.matches("x")"#), 22);
    // A literal string: ceil(1 / 10) × ceil(25 / 4) = 7. Upstream: 7.
    let rule = r#""".matches("(((((((((())))))))))[0-9]")"#;
    assert_eq!(cost(string(None), rule), 7);
}

#[test]
fn nested_loops_multiply() {
    let numbers = array(json!({"type": "number"}), Some(10));
    // Inner all = 32, outer = 2 + 10 × (3 + 32). Upstream: 352.
    assert_eq!(cost(numbers.clone(), "self.all(x, self.all(y, true))"), 352);
    // 2 + 10 × (3 + 352). Upstream: 3552.
    let rule = "self.all(x, self.all(y, self.all(z, true)))";
    assert_eq!(cost(numbers, rule), 3552);
    // Lists of maps of objects: x["y"] (2) .required (+1) == "z" (1) = 4 per item, 7 with
    // the loop. Unbounded: 1,048,575 maps; upstream 7340027; bounded by 10: 72.
    let item = |max: Option<u64>| {
        let mut value = json!({"type": "object", "required": ["required"], "properties": {
            "required": {"type": "string"}, "optional": {"type": "string"}}});
        let mut map = json!({"type": "object", "additionalProperties": {}});
        if let Some(m) = max {
            value["maxProperties"] = json!(m);
            map["maxProperties"] = json!(m);
        }
        map["additionalProperties"] = value;
        map
    };
    let rule = r#"self.all(x, x["y"].required == "z")"#;
    assert_eq!(cost(array(item(None), None), rule), 7_340_027);
    assert_eq!(cost(array(item(Some(10)), Some(10)), rule), 72);
}

#[test]
fn map_filter_exists_and_join() {
    let names = array(string(Some(10)), Some(10));
    // exists: condition !r (3 with @not_strictly_false), step r || body: 2 + 10 × (3 + 1 +
    // startsWith 2) = 62.
    assert_eq!(cost(names.clone(), "self.exists(n, n.startsWith('a'))"), 62);
    // map: [] costs 10, each step r + [f(n)] = 1 + 1 + 10 + size 2 = 14; then size() 1 and
    // == 1 (the result is an int): 1 + 10 + 1 + 10 × 14 + 1 + 1 = 154.
    assert_eq!(
        cost(names.clone(), "self.map(n, n.size()).size() == 3"),
        154
    );
    // filter: step c ? r + [n] : r = 2 (startsWith) + 1 + 1 + 10 + 1 = 15 per item:
    // 1 + 10 + 1 + 10 × 15 = 162, then size() 1 and == 1.
    assert_eq!(
        cost(
            names.clone(),
            "self.filter(n, n.startsWith('a')).size() == 1"
        ),
        164
    );
    // join: 10 × 40 bytes + 9 separators = 409, ceil(40.9) + 1 = 42, == 'aa bb' 1.
    // Upstream: 43.
    assert_eq!(cost(names, "self.join(' ') == 'aa bb'"), 43);
}

#[test]
fn has_and_comparisons() {
    let object = json!({"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 5}, "n": {"type": "integer"}}});
    // has() is free besides its operand (1); self.a.size() 3; < 1; && adds nothing: 5.
    assert_eq!(cost(object.clone(), "has(self.a) && self.a.size() < 5"), 5);
    // An integer field has size 0 for upstream's size estimator, so == costs nothing:
    // self.n (2) == 3 (0).
    assert_eq!(cost(object.clone(), "self.n == 3"), 2);
    // Ordering ints costs 1: 2 + 1 + 2.
    assert_eq!(cost(object, "self.n <= self.n"), 5);
}

#[test]
fn self_at_the_root_sees_capped_metadata() {
    let root = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
    // At the root, metadata.name is capped at 253 characters (1,012 bytes) and kind is an
    // unbounded string: self.metadata.name (3) == self.kind (2) + ceil(1,012 / 10).
    assert_eq!(
        cost_at(&root, "self.metadata.name == self.kind", true),
        3 + 2 + 102
    );
}

#[test]
fn nested_lists_of_names_as_in_the_conformance_test() {
    let groups = |outer: Option<u64>, inner: Option<u64>, len: Option<u64>| {
        let spec = json!({"type": "object", "properties": {
            "groups": array(array(string(len), inner), outer)}});
        cost(
            spec,
            "self.groups.all(g, g.all(n, n.matches('^[a-z][a-z0-9-]*$')))",
        )
    };
    // n.matches: ceil(253 / 10) × ceil(17 / 4) + 1 = 131; inner all: 1 + 1 + 10 × (3 + 131)
    // = 1,342; outer: self.groups (2) + 1 + 10 × (3 + 1,342) = 13,453.
    assert_eq!(groups(Some(10), Some(10), Some(63)), 13_453);
    // Unbounded: 1,048,575 lists of 1,048,575 strings of 3,145,726 characters;
    // n.matches = 314,573 × 5 + 1 = 1,572,866; inner all = 2 + 1,048,575 × 1,572,869.
    let inner = 2 + 1_048_575 * 1_572_869_u64;
    assert_eq!(groups(None, None, None), 3 + 1_048_575 * (3 + inner));
}

fn crd_causes(schema: Value) -> Vec<Cause> {
    match compile(&schema, "s") {
        Ok(_) => Vec::new(),
        Err(c) => c,
    }
}

fn spec_with(props: Value) -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}})
}

#[test]
fn rules_inside_unbounded_lists_are_multiplied_by_what_fits_in_a_request() {
    // Each string item's rule: ceil(41 / 10) × ceil(8 / 4) + 1 = 11; a list without maxItems
    // holds 3,145,728 / 3 = 1,048,576 strings: 11,534,336, 1.153434 times the budget.
    let rule = json!([{"rule": "self.matches('^[a-z]+$')"}]);
    let mut item = string(Some(10));
    item["x-kubernetes-validations"] = rule.clone();
    let causes = crd_causes(spec_with(json!({"names": array(item.clone(), None)})));
    let field = "s.properties[spec].properties[names].items.x-kubernetes-validations[0].rule";
    assert_eq!(
        causes,
        [Cause::forbidden(
            field,
            &over_budget("estimated rule cost", 11_534_336, RULE_LIMIT)
        )]
    );
    assert!(
        causes[0]
            .message
            .contains("by factor of 1.153434x (try simplifying")
    );
    // With maxItems the rule runs at most 100 times.
    assert!(crd_causes(spec_with(json!({"names": array(item, Some(100))}))).is_empty());
    // maxLength 63 (252 bytes): ceil(25.3) × 2 + 1 = 53 per item, 5.6 times the budget.
    let mut item = string(Some(63));
    item["x-kubernetes-validations"] = rule;
    let causes = crd_causes(spec_with(json!({"names": array(item, None)})));
    assert!(
        causes[0].message.contains("by factor of 5.6x"),
        "{causes:?}"
    );
}

#[test]
fn message_expressions_have_their_own_budget() {
    let mut names = array(string(None), None);
    names["x-kubernetes-validations"] = json!([{"rule": "self.size() > 0",
        "messageExpression": "'bad: ' + self.join(', ')"}]);
    let causes = crd_causes(spec_with(json!({"names": names})));
    let at = "s.properties[spec].properties[names].x-kubernetes-validations[0]";
    assert_eq!(causes.len(), 3, "{causes:?}");
    // The join alone is ~3.3e11: far over the per-rule budget (it is not multiplied by the
    // node's cardinality), and so over the schema's, which it is named as exceeding.
    assert_eq!(causes[0].field, format!("{at}.messageExpression"));
    assert_eq!(causes[0].reason, "FieldValueForbidden");
    assert_eq!(
        causes[0].message,
        "Forbidden: estimated messageExpression cost exceeds budget by factor of more than \
         100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where \
         arrays, maps, and strings are declared)"
    );
    assert_eq!(causes[1].field, format!("{at}.messageExpression"));
    assert!(
        causes[1]
            .message
            .contains("contributed to estimated rule cost total")
    );
    assert_eq!(causes[2].field, "s");
}

#[test]
fn the_schema_total_has_its_own_budget() {
    // 11 rules of ceil(3,145,727 / 10) × ceil(120 / 4) + 1 = 9,437,191 each: each within the
    // per-rule budget, 103,809,101 together.
    let regex = "[a-z]".repeat(24);
    let mut props = serde_json::Map::new();
    for i in 0..11 {
        let mut s = string(None);
        s["x-kubernetes-validations"] = json!([{"rule": format!("self.matches('{regex}')")}]);
        props.insert(format!("p{i:02}"), s);
    }
    let causes = crd_causes(spec_with(Value::Object(props)));
    let contributed = "Forbidden: contributed to estimated rule cost total exceeding cost limit \
                       for entire OpenAPIv3 schema";
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        (0..4)
            .map(|i| format!(
                "s.properties[spec].properties[p{i:02}].x-kubernetes-validations[0].rule"
            ))
            .chain(["s".to_string()])
            .collect::<Vec<_>>()
    );
    assert!(causes[..4].iter().all(|c| c.message == contributed));
    assert_eq!(
        causes[4].message,
        "Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 \
         schema exceeds budget by factor of 1.038091x (try simplifying the rule, or adding \
         maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    );
}

#[test]
fn factors_are_worded_as_upstream() {
    let msg = over_budget("estimated rule cost", 250_000_000, RULE_LIMIT);
    assert!(msg.starts_with("estimated rule cost exceeds budget by factor of 25.0x (try"));
    let msg = over_budget("estimated rule cost", 10_000_001, RULE_LIMIT);
    assert!(msg.contains("factor of 1.000000x"));
    let msg = over_budget("estimated rule cost", u64::MAX, RULE_LIMIT);
    assert!(msg.contains("factor of more than 100x"));
}

#[test]
fn string_conversions_have_unknown_sizes_as_upstream() {
    // Upstream's validation test "rule invalidated by messageExpression exceeding per-CRD
    // estimated cost limit": string() of a value has no size estimate, so concatenating such
    // results has an unbounded size and cost.
    let mut f = array(string(None), None);
    f["x-kubernetes-validations"] = json!([{"rule": "true",
        "messageExpression": "string(self[0]) + string(self[1]) + string(self[2])"}]);
    let causes = crd_causes(json!({"type": "object", "properties": {"f": f}}));
    let at = "s.properties[f].x-kubernetes-validations[0].messageExpression";
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, [at, at, "s"]);
    assert!(causes.iter().all(|c| c.reason == "FieldValueForbidden"));
}
