//! CRD validation rules (`x-kubernetes-validations`, CEL): object, item, map-value and scalar
//! rules, `message`, `messageExpression`, `reason`, `fieldPath`, transition rules with
//! `oldSelf` (immutability, no decrease, `optionalOldSelf`), list-map item correlation, rules
//! on `/status` writes, and refusal of a CRD whose rule does not compile or whose estimated
//! cost is over upstream's budget.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{Env, api_err, dynobj, env};

fn versions() -> Value {
    json!([{
        "name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object",
                "x-kubernetes-validations": [
                    {"rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
                     "message": "minReplicas must not exceed maxReplicas"},
                    {"rule": "!has(self.legacy)", "reason": "FieldValueForbidden",
                     "fieldPath": ".legacy", "messageExpression": "'legacy is set to ' + self.legacy"}],
                "properties": {
                    "name": {"type": "string", "maxLength": 20,
                        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "name is immutable"}]},
                    "minReplicas": {"type": "integer"},
                    "maxReplicas": {"type": "integer"},
                    "legacy": {"type": "string", "maxLength": 20},
                    "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf",
                        "messageExpression": "'size may not shrink from %d'.format([oldSelf])"}]},
                    "version": {"type": "integer", "x-kubernetes-validations": [{
                        "rule": "oldSelf.hasValue() ? self >= oldSelf.value() : self == 1",
                        "optionalOldSelf": true, "message": "version starts at 1 and never decreases"}]},
                    "ports": {"type": "array", "maxItems": 10, "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "required": ["name"], "properties": {
                            "name": {"type": "string", "maxLength": 20}, "port": {"type": "integer"}},
                            "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "port is immutable"}]}},
                    "labels": {"type": "object", "maxProperties": 10, "additionalProperties": {
                        "type": "string", "maxLength": 64,
                        "x-kubernetes-validations": [{"rule": "self.size() <= 10"}]}},
                    "host": {"type": "string", "maxLength": 63, "x-kubernetes-validations": [{
                        "rule": "self.startsWith('db-') && self.matches('^[a-z0-9-]+$')",
                        "reason": "FieldValueInvalid", "message": "host must be db-<name>"}]}}},
            "status": {"type": "object", "properties": {
                "phase": {"type": "string", "maxLength": 20, "x-kubernetes-validations": [
                    {"rule": "self in ['Pending', 'Ready']", "message": "unknown phase"}]}}}}}}
    }])
}

async fn rules_env(test: &str) -> (Env, ApiResource, Api<DynamicObject>) {
    let mut env = env(test).await;
    let ar = env.crd("Ruled", versions()).await;
    let api = env.dynamic(&ar);
    (env, ar, api)
}

fn causes(s: &kube::core::Status) -> Vec<(String, String)> {
    s.details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| (c.field.clone(), c.reason.clone()))
        .collect()
}

async fn merge(
    api: &Api<DynamicObject>,
    name: &str,
    spec: Value,
) -> Result<DynamicObject, kube::Error> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
}

#[tokio::test]
async fn rules_accept_and_reject_with_upstream_wording() {
    let (env, ar, api) = rules_env("cel-rules").await;
    let pp = PostParams::default();
    let ok = dynobj(
        &ar,
        "ok",
        json!({"minReplicas": 1, "maxReplicas": 3, "host": "db-one",
        "labels": {"a": "short"}}),
    );
    api.create(&pp, &ok).await.unwrap();

    let err = api_err(
        api.create(
            &pp,
            &dynobj(&ar, "minmax", json!({"minReplicas": 4, "maxReplicas": 3})),
        )
        .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(
        err.message
            .contains("spec: Invalid value: minReplicas must not exceed maxReplicas"),
        "{}",
        err.message
    );
    assert_eq!(
        causes(&err),
        [("spec".to_string(), "FieldValueInvalid".to_string())]
    );

    let err = api_err(
        api.create(&pp, &dynobj(&ar, "legacy", json!({"legacy": "x"})))
            .await,
    );
    assert!(
        err.message
            .contains("spec.legacy: Forbidden: legacy is set to x"),
        "{}",
        err.message
    );
    assert_eq!(
        causes(&err),
        [("spec.legacy".to_string(), "FieldValueForbidden".to_string())]
    );

    let bad = json!({"host": "web-1", "labels": {"a": "ok", "b": "far too long"}});
    let err = api_err(api.create(&pp, &dynobj(&ar, "several", bad)).await);
    assert!(
        err.message
            .contains("spec.host: Invalid value: \"web-1\": host must be db-<name>"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains(
            "spec.labels[b]: Invalid value: \"far too long\": failed rule: self.size() <= 10"
        ),
        "{}",
        err.message
    );
    assert_eq!(
        causes(&err).len(),
        2,
        "errors are aggregated: {}",
        err.message
    );
    env.finish().await;
}

#[tokio::test]
async fn transition_rules_compare_with_the_stored_object() {
    let (env, ar, api) = rules_env("cel-transition").await;
    let spec = json!({"name": "a", "size": 3, "version": 1,
        "ports": [{"name": "http", "port": 80}]});
    api.create(&PostParams::default(), &dynobj(&ar, "t", spec))
        .await
        .unwrap();

    let err = api_err(merge(&api, "t", json!({"name": "b"})).await);
    assert!(
        err.message
            .contains("spec.name: Invalid value: \"b\": name is immutable"),
        "{}",
        err.message
    );
    let err = api_err(merge(&api, "t", json!({"size": 2})).await);
    assert!(
        err.message
            .contains("spec.size: Invalid value: 2: size may not shrink from 3"),
        "{}",
        err.message
    );
    let err = api_err(merge(&api, "t", json!({"version": 0})).await);
    assert!(
        err.message
            .contains("version starts at 1 and never decreases"),
        "{}",
        err.message
    );
    // Items of a map list are matched by key: a new item has no old value, a changed one has.
    let ports = json!({"ports": [{"name": "admin", "port": 9}, {"name": "http", "port": 81}]});
    let err = api_err(merge(&api, "t", ports).await);
    assert!(
        err.message
            .contains("spec.ports[1]: Invalid value: port is immutable"),
        "{}",
        err.message
    );
    assert_eq!(causes(&err).len(), 1, "{}", err.message);
    let grown = json!({"size": 5, "version": 2,
        "ports": [{"name": "admin", "port": 9}, {"name": "http", "port": 80}]});
    let updated = merge(&api, "t", grown).await.unwrap();
    assert_eq!(updated.data["spec"]["size"], 5);
    // A field set for the first time has no old value: transition rules do not apply.
    merge(&api, "t", json!({"minReplicas": 1})).await.unwrap();

    // On create, `optionalOldSelf` runs the rule with no old value.
    let err = api_err(
        api.create(
            &PostParams::default(),
            &dynobj(&ar, "v2", json!({"version": 2})),
        )
        .await,
    );
    assert!(
        err.message
            .contains("spec.version: Invalid value: 2: version starts at 1"),
        "{}",
        err.message
    );
    env.finish().await;
}

#[tokio::test]
async fn status_writes_run_the_rules_too() {
    let (env, ar, api) = rules_env("cel-status").await;
    api.create(
        &PostParams::default(),
        &dynobj(&ar, "s", json!({"name": "a", "size": 3})),
    )
    .await
    .unwrap();
    let status = |phase: &str| Patch::Merge(json!({"status": {"phase": phase}}));
    let err = api_err(
        api.patch_status("s", &PatchParams::default(), &status("Bogus"))
            .await,
    );
    assert!(
        err.message
            .contains("status.phase: Invalid value: \"Bogus\": unknown phase"),
        "{}",
        err.message
    );
    // The spec's transition rules see the stored spec and do not block status writes.
    let ok = api
        .patch_status("s", &PatchParams::default(), &status("Ready"))
        .await
        .unwrap();
    assert_eq!(ok.data["status"]["phase"], "Ready");
    env.finish().await;
}

#[tokio::test]
async fn crd_with_a_rule_that_does_not_compile_is_refused() {
    let env = env("cel-bad-crd").await;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "badrules.conformance.steward.dev"},
        "spec": {"group": "conformance.steward.dev", "scope": "Namespaced",
            "names": {"plural": "badrules", "kind": "BadRule"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"n": {"type": "integer"}},
                        "x-kubernetes-validations": [{"rule": "self.n >"}]}}}}}]}
    }))
    .unwrap();
    let api = Api::<CustomResourceDefinition>::all(env.client.clone());
    let err = api_err(api.create(&PostParams::default(), &crd).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    // One schema for every version is checked once, as `spec.validation` (upstream's internal
    // version holds it there).
    let field = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule";
    assert!(err.message.contains(field), "{}", err.message);
    assert!(!err.message.contains("spec.versions["), "{}", err.message);
    // The rule is shown as Go's JSON of the ValidationRule (1.36), `>` escaped as `\u003e`.
    assert!(
        err.message.contains(
            r#"rule: Invalid value: {"Rule":"self.n \u003e","Message":"","MessageExpression":"","Reason":null,"FieldPath":"","OptionalOldSelf":null}: compilation failed"#
        ),
        "{}",
        err.message
    );
    assert!(
        api.get_opt("badrules.conformance.steward.dev")
            .await
            .unwrap()
            .is_none()
    );

    // Versions with different schemas are checked each on its own, at its own path.
    let schema = |rule: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"n": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": rule}]}}}})
    };
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "badrules.conformance.steward.dev"},
        "spec": {"group": "conformance.steward.dev", "scope": "Namespaced",
            "names": {"plural": "badrules", "kind": "BadRule"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema("self.n > 0")},
                {"name": "v2", "served": true, "storage": false, "schema": schema("self.n >")}]}
    }))
    .unwrap();
    let err = api_err(api.create(&PostParams::default(), &crd).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        causes(&err),
        [(
            "spec.versions[1].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
                .to_string(),
            "FieldValueInvalid".to_string()
        )],
        "{}",
        err.message
    );
    assert!(
        api.get_opt("badrules.conformance.steward.dev")
            .await
            .unwrap()
            .is_none()
    );
    env.finish().await;
}

/// Lists of lists of names, with or without `maxItems`/`maxLength`.
fn name_groups(bounded: bool) -> Value {
    let (mut outer, mut inner, mut name) = (
        json!({"type": "array"}),
        json!({"type": "array"}),
        json!({"type": "string"}),
    );
    if bounded {
        outer["maxItems"] = json!(10);
        inner["maxItems"] = json!(10);
        name["maxLength"] = json!(63);
    }
    inner["items"] = name;
    outer["items"] = inner;
    json!([{"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"groups": outer},
                "x-kubernetes-validations": [{
                    "rule": "self.groups.all(g, g.all(n, n.matches('^[a-z][a-z0-9-]*$')))",
                    "message": "names are lowercase DNS labels"}]}}}}}])
}

#[tokio::test]
async fn crd_with_a_rule_over_the_cost_budget_is_refused() {
    let mut env = env("cel-cost").await;
    // Unbounded, the rule's estimate is about 1.6e12 (a million lists of a million 3 MiB
    // strings, each matched against the pattern): far over the 10,000,000 budget.
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "costlyrules.conformance.steward.dev"},
        "spec": {"group": "conformance.steward.dev", "scope": "Namespaced",
            "names": {"plural": "costlyrules", "kind": "CostlyRule"},
            "versions": name_groups(false)}
    }))
    .unwrap();
    let api = Api::<CustomResourceDefinition>::all(env.client.clone());
    let err = api_err(api.create(&PostParams::default(), &crd).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    // One schema for every version: upstream reports it as `spec.validation`.
    let rule = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule";
    assert!(
        err.message.contains(&format!(
            "{rule}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x \
             (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where \
             arrays, maps, and strings are declared)"
        )),
        "{}",
        err.message
    );
    // The rule over its own budget, then (the schema's total over its budget too) the rule as
    // a contributor and the schema as a whole.
    let forbidden = |f: &str| (f.to_string(), "FieldValueForbidden".to_string());
    assert_eq!(
        causes(&err),
        [
            forbidden(rule),
            forbidden(rule),
            forbidden("spec.validation.openAPIV3Schema")
        ],
        "{}",
        err.message
    );
    assert!(
        err.message.contains(
            "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule \
             cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x"
        ),
        "{}",
        err.message
    );
    assert!(
        api.get_opt("costlyrules.conformance.steward.dev")
            .await
            .unwrap()
            .is_none()
    );

    // Bounded (10 lists of 10 names of 63 characters), the same rule costs 13,453.
    let ar = env.crd("CostBounded", name_groups(true)).await;
    let objs = env.dynamic(&ar);
    let pp = PostParams::default();
    let ok = dynobj(&ar, "ok", json!({"groups": [["a", "b-1"], ["c"]]}));
    objs.create(&pp, &ok).await.unwrap();
    let bad = dynobj(&ar, "bad", json!({"groups": [["a"], ["Not_A_Label"]]}));
    let err = api_err(objs.create(&pp, &bad).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(
        err.message.contains("names are lowercase DNS labels"),
        "{}",
        err.message
    );
    env.finish().await;
}
