//! Rules compiled from small schemas and run on objects, old objects included.

use serde_json::{Value, json};

use super::{compile, validate};
use crate::status::Cause;

fn schema() -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "message": "min must not exceed max"},
            {"rule": "self.name == oldSelf.name", "message": "name is immutable"},
            {"rule": "!has(self.forbidden)", "reason": "FieldValueForbidden",
             "messageExpression": "'forbidden is %d'.format([self.forbidden])"},
            {"rule": "self.min >= 0", "fieldPath": ".min"}],
        "properties": {
            "name": {"type": "string"},
            "min": {"type": "integer"}, "max": {"type": "integer"},
            "forbidden": {"type": "integer"},
            "size": {"type": "integer",
                "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "no shrinking"}]},
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "port": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port",
                        "message": "port is immutable"}]}},
            "labels": {"type": "object", "additionalProperties": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self.size() <= 3"}]}}}}}})
}

fn check(obj: Value, old: Option<Value>) -> Vec<Cause> {
    let v = compile(&schema(), "s").unwrap().unwrap();
    validate(&v, &obj, old.as_ref(), &[])
}

fn spec(s: Value) -> Value {
    json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": s})
}

fn rendered(c: &[Cause]) -> Vec<String> {
    c.iter().map(Cause::render).collect()
}

#[test]
fn object_rules_message_expression_reason_and_field_path() {
    let c = check(
        spec(json!({"name": "a", "min": -3, "max": -5, "forbidden": 7})),
        None,
    );
    assert_eq!(
        rendered(&c),
        [
            "spec: Invalid value: min must not exceed max",
            "spec: Forbidden: forbidden is 7",
            "spec.min: Invalid value: failed rule: self.min >= 0",
        ]
    );
    assert_eq!(c[1].reason, "FieldValueForbidden");
    assert!(check(spec(json!({"name": "a", "min": 1, "max": 2})), None).is_empty());
}

#[test]
fn transition_rules_need_an_old_value() {
    let new = spec(json!({"name": "b", "min": 1, "max": 2, "size": 1}));
    assert!(check(new.clone(), None).is_empty());
    let old = spec(json!({"name": "a", "min": 1, "max": 2, "size": 3}));
    assert_eq!(
        rendered(&check(new, Some(old))),
        [
            "spec: Invalid value: name is immutable",
            "spec.size: Invalid value: 1: no shrinking",
        ]
    );
}

#[test]
fn map_list_items_correlate_by_key_and_map_values_by_key() {
    let old = spec(json!({"name": "a", "min": 1, "max": 2,
        "ports": [{"name": "http", "port": 80}, {"name": "x", "port": 1}]}));
    let new = spec(json!({"name": "a", "min": 1, "max": 2,
        "ports": [{"name": "new", "port": 9}, {"name": "http", "port": 81}],
        "labels": {"ok": "abc", "bad": "abcd"}}));
    assert_eq!(
        rendered(&check(new, Some(old))),
        [
            "spec.labels[bad]: Invalid value: \"abcd\": failed rule: self.size() <= 3",
            "spec.ports[1]: Invalid value: port is immutable",
        ]
    );
}

#[test]
fn unchanged_values_are_ratcheted() {
    let bad = spec(json!({"name": "a", "min": 5, "max": 1}));
    assert_eq!(check(bad.clone(), None).len(), 1);
    assert!(check(bad.clone(), Some(bad)).is_empty());
}

#[test]
fn runtime_errors_and_blocking_causes() {
    let c = check(spec(json!({"name": "a", "max": 1})), None);
    assert_eq!(
        rendered(&c),
        [
            "spec: Invalid value: \"object\": no such key: min evaluating rule: min must not exceed max",
            "spec: Invalid value: \"object\": no such key: min evaluating rule: self.min >= 0",
        ]
    );
    let v = compile(&schema(), "s").unwrap().unwrap();
    let blocking = [Cause::required("spec.min")];
    let c = validate(&v, &spec(json!({})), None, &blocking);
    assert_eq!(c.len(), 1);
    assert!(
        c[0].message
            .contains("some validation rules were not checked")
    );
}

#[test]
fn optional_old_self_runs_on_create() {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"v": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "!oldSelf.hasValue() ? self.v == 1 : self.v > oldSelf.value().v",
            "optionalOldSelf": true, "message": "starts at 1 and grows"}]}}});
    let v = compile(&s, "s").unwrap().unwrap();
    assert_eq!(validate(&v, &spec(json!({"v": 2})), None, &[]).len(), 1);
    assert!(validate(&v, &spec(json!({"v": 1})), None, &[]).is_empty());
    let old = spec(json!({"v": 1}));
    assert!(validate(&v, &spec(json!({"v": 2})), Some(&old), &[]).is_empty());
    assert_eq!(
        validate(&v, &spec(json!({"v": 0})), Some(&old), &[]).len(),
        1
    );
}

#[test]
fn bad_rules_refuse_the_crd_with_their_path() {
    let s = json!({"type": "object", "properties": {
        "a": {"type": "string", "x-kubernetes-validations": [{"rule": "self >"}]},
        "b": {"type": "string", "x-kubernetes-validations": [{"rule": "quantity(self) > 1"}]},
        "c": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 10,
            "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}},
        "d": {"type": "string", "x-kubernetes-validations": [
            {"rule": "true", "reason": "Nope"}, {"rule": "true", "fieldPath": ".x"},
            {"rule": "true", "messageExpression": "foo()"}]}}});
    let causes = compile(&s, "root").unwrap_err();
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "root.properties[a].x-kubernetes-validations[0].rule",
            "root.properties[b].x-kubernetes-validations[0].rule",
            "root.properties[c].items.x-kubernetes-validations[0].rule",
            "root.properties[d].x-kubernetes-validations[0].reason",
            "root.properties[d].x-kubernetes-validations[1].fieldPath",
            "root.properties[d].x-kubernetes-validations[2].messageExpression",
        ]
    );
    assert!(
        causes[0]
            .message
            .contains("compilation failed: ERROR: <input>:1:")
    );
    assert!(causes[1].message.contains("'quantity' is not supported"));
    assert!(
        causes[2]
            .message
            .contains("oldSelf cannot be used on the uncorrelatable")
    );
    assert!(causes[5].message.contains("undeclared reference to 'foo'"));
    assert!(compile(&json!({"type": "object"}), "r").unwrap().is_none());
}

fn compiles(rule: &str) -> Result<(), String> {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": rule}],
        "properties": {
            "min-size": {"type": "integer"},
            "ports": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
    compile(&s, "r")
        .map(|_| ())
        .map_err(|c| c.iter().map(Cause::render).collect::<Vec<_>>().join("; "))
}

#[test]
fn fields_and_identifiers_are_checked_like_the_type_checker() {
    for ok in [
        "self.min__dash__size >= 0",
        "has(self.ports) && self.ports.all(p, p.name != '')",
        "self.labels.all(k, self.labels[k] != '') && self.labels.x == 'y'",
        "self.free.anything.at.all == 1",
        "type(self.min__dash__size) == int",
        "self.?ports.orValue([]).size() < 3",
    ] {
        assert_eq!(compiles(ok), Ok(()), "{ok}");
    }
    let err = compiles("self.minSize >= 0").unwrap_err();
    assert!(
        err.contains("compilation failed: ERROR: <input>:1:5: undefined field 'minSize'"),
        "{err}"
    );
    let err = compiles("has(self.nope)").unwrap_err();
    assert!(err.contains("undefined field 'nope'"), "{err}");
    let err = compiles("self.ports.exists(p, p.nmae == 'x')").unwrap_err();
    assert!(err.contains("undefined field 'nmae'"), "{err}");
    let err = compiles("self.min__dash__size == oldself.min__dash__size").unwrap_err();
    assert!(err.contains("undeclared reference to 'oldself'"), "{err}");
    let err = compiles("\nself.labels == p").unwrap_err();
    assert!(
        err.contains("<input>:2:16: undeclared reference to 'p'"),
        "{err}"
    );
}

#[test]
fn the_root_exposes_api_version_kind_and_metadata() {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object"}},
        "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('a') && self.kind == 'X'",
            "message": "names start with a"}]});
    let v = compile(&s, "r").unwrap().unwrap();
    assert!(validate(&v, &spec(json!({})), None, &[]).is_empty());
    let mut other = spec(json!({}));
    other["metadata"]["name"] = json!("b");
    assert_eq!(
        rendered(&validate(&v, &other, None, &[])),
        ["<nil>: Invalid value: names start with a"]
    );
}

#[test]
fn a_list_index_of_fails_when_it_runs_rather_than_passing() {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"l": {"type": "array", "items": {"type": "integer"}}},
        "x-kubernetes-validations": [{"rule": "self.l.indexOf(1) == 0"}]}}});
    let v = compile(&s, "r").unwrap().unwrap();
    let c = validate(&v, &spec(json!({"l": [1, 2]})), None, &[]);
    assert_eq!(c.len(), 1);
    assert!(
        c[0].message.contains("'no such overload'"),
        "{}",
        c[0].message
    );
}
