//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, `>`/`<`) and field selectors
//! (`=`, `==`, `!=`) as the real server parses them, plus the per-kind list of selectable fields.
//! Matching only: this module never touches stored objects.

use serde_json::Value;

use crate::meta;
use crate::registry::ResourceDef;

#[derive(Clone, Debug, PartialEq)]
pub enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    Gt(String, i64),
    Lt(String, i64),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(pub Vec<LabelReq>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected parenthesised set, found {rest:?}"))?;
    let vals: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if let Some(bad) = vals.iter().find(|v| !valid_value(v)) {
        return Err(format!("invalid label value: {bad:?}"));
    }
    Ok(vals)
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let req = if let Some(k) = part.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('>') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid number in {part:?}"))?;
                LabelReq::Gt(k.trim().into(), n)
            } else if let Some((k, v)) = part.split_once('<') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid number in {part:?}"))?;
                LabelReq::Lt(k.trim().into(), n)
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                LabelReq::NotIn(k.trim().into(), parse_set(rest)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                LabelReq::In(k.trim().into(), parse_set(rest)?)
            } else if part.contains(' ') || part.contains('(') {
                return Err(format!("unable to parse requirement: {part:?}"));
            } else {
                LabelReq::Exists(part.clone())
            };
            let (LabelReq::Eq(k, _)
            | LabelReq::NotEq(k, _)
            | LabelReq::In(k, _)
            | LabelReq::NotIn(k, _)
            | LabelReq::Exists(k)
            | LabelReq::NotExists(k)
            | LabelReq::Gt(k, _)
            | LabelReq::Lt(k, _)) = &req;
            if !valid_key(k) {
                return Err(format!("invalid label key {k:?}"));
            }
            if let LabelReq::Eq(_, v) | LabelReq::NotEq(_, v) = &req
                && !valid_value(v)
            {
                return Err(format!("invalid label value: {v:?}"));
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = meta::labels(obj);
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Gt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            LabelReq::Lt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

/// Fields the real server lets clients select on, per kind (beyond metadata.name/namespace).
fn selectable(def: &ResourceDef) -> Vec<&str> {
    let mut v: Vec<&str> = vec!["metadata.name", "metadata.namespace"];
    let extra: &[&str] = match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "Event") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "Secret") => &["type"],
        ("", "Node") => &["spec.unschedulable"],
        ("", "Namespace") => &["status.phase"],
        ("", "PersistentVolumeClaim") => &["status.phase"],
        ("batch", "Job") => &["status.successful"],
        ("apps", "ReplicaSet") => &["status.replicas"],
        _ => &[],
    };
    v.extend_from_slice(extra);
    v.extend(def.selectable_fields.iter().map(String::as_str));
    v
}

fn field_value(obj: &Value, path: &str) -> String {
    match meta::get_path(obj, path) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

impl FieldSelector {
    pub fn parse(s: &str, def: &ResourceDef) -> Result<Self, String> {
        let allowed = selectable(def);
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                ));
            };
            let k = k.trim();
            if !allowed.contains(&k) {
                return Err(format!("field label not supported: {k}"));
            }
            out.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(Self(out))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(k, eq, v)| (field_value(obj, k) == *v) == *eq)
    }
}

/// Matches a stored object as seen through `def` (converted kinds select on their own fields).
pub fn matches_as(sel: &Selectors, def: &ResourceDef, stored: &Value) -> bool {
    if crate::convert::is_events_v1(def) {
        sel.matches(&crate::write::to_version(def, stored))
    } else {
        sel.matches(stored)
    }
}

/// Both selectors of a list or watch request.
#[derive(Clone, Debug, Default)]
pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "n", "labels": labels}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "db", "tier": "1", "env": "prod"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=db"));
        assert!(m("app==db,tier"));
        assert!(!m("app!=db"));
        assert!(m("env in (prod, staging)"));
        assert!(!m("env notin (prod)"));
        assert!(m("missing notin (x)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("tier>0"));
        assert!(!m("tier<1"));
        assert!(m(""));
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selectors_are_per_kind() {
        let r = Registry::with_builtins();
        let pods = r.lookup("", "v1", "pods").unwrap();
        let cms = r.lookup("", "v1", "configmaps").unwrap();
        let o = obj(json!({}));
        let m = |s: &str| FieldSelector::parse(s, &pods).unwrap().matches(&o);
        assert!(m("metadata.name=a"));
        assert!(m("spec.nodeName==n1,status.phase!=Pending"));
        assert!(!m("metadata.namespace=other"));
        assert!(FieldSelector::parse("spec.nodeName=x", &cms).is_err());
        let unscheduled = json!({"metadata": {"name": "b"}});
        assert!(
            FieldSelector::parse("spec.nodeName=", &pods)
                .unwrap()
                .matches(&unscheduled)
        );
    }
}
