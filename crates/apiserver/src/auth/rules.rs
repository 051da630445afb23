//! RBAC policy rules: parsing from a Role's `rules`, matching a request (`verbs` with `*`,
//! `apiGroups`, `resources` with `resource/subresource` and `*/subresource`, `resourceNames`,
//! `nonResourceURLs` with a trailing `*`), and coverage of one rule by a set of held rules, for
//! escalation checks (upstream `validation.Covers`).

use serde_json::Value;

use super::Attributes;
use crate::meta;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == "*" || s == item)
}

impl Rule {
    pub fn from_json(v: &Value) -> Self {
        Self {
            verbs: meta::strings(v.get("verbs")),
            api_groups: meta::strings(v.get("apiGroups")),
            resources: meta::strings(v.get("resources")),
            resource_names: meta::strings(v.get("resourceNames")),
            non_resource_urls: meta::strings(v.get("nonResourceURLs")),
        }
    }

    /// The `rules` of a Role or ClusterRole.
    pub fn list(role: &Value) -> Vec<Self> {
        role.get("rules")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(Self::from_json).collect())
            .unwrap_or_default()
    }

    pub fn allows(&self, a: &Attributes) -> bool {
        if !has(&self.verbs, &a.verb) {
            return false;
        }
        if !a.resource_request {
            return self
                .non_resource_urls
                .iter()
                .any(|u| url_matches(u, &a.path));
        }
        has(&self.api_groups, &a.group)
            && resource_matches(&self.resources, &a.resource, &a.subresource)
            && (self.resource_names.is_empty() || self.resource_names.contains(&a.name))
    }

    /// Whether `held` together grant everything this rule grants.
    pub fn covered_by(&self, held: &[&Rule]) -> bool {
        let names: Vec<Option<&String>> = if self.resource_names.is_empty() {
            vec![None]
        } else {
            self.resource_names.iter().map(Some).collect()
        };
        for verb in &self.verbs {
            for url in &self.non_resource_urls {
                if !held.iter().any(|h| {
                    has(&h.verbs, verb) && h.non_resource_urls.iter().any(|u| url_matches(u, url))
                }) {
                    return false;
                }
            }
            for group in &self.api_groups {
                for resource in &self.resources {
                    for name in &names {
                        if !held
                            .iter()
                            .any(|h| h.covers_atom(verb, group, resource, *name))
                        {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    fn covers_atom(&self, verb: &str, group: &str, resource: &str, name: Option<&String>) -> bool {
        let resource_ok = has(&self.resources, resource)
            || resource.split_once('/').is_some_and(|(_, sub)| {
                self.resources
                    .iter()
                    .any(|r| r.strip_prefix("*/") == Some(sub))
            });
        has(&self.verbs, verb)
            && has(&self.api_groups, group)
            && resource_ok
            && (self.resource_names.is_empty()
                || name.is_some_and(|n| self.resource_names.contains(n)))
    }

    /// `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`, as upstream prints rules.
    pub fn compact(&self) -> String {
        let q = |v: &[String]| {
            let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
            format!("[{}]", items.join(" "))
        };
        let mut parts = Vec::new();
        if !self.api_groups.is_empty() {
            parts.push(format!("APIGroups:{}", q(&self.api_groups)));
        }
        if !self.resources.is_empty() {
            parts.push(format!("Resources:{}", q(&self.resources)));
        }
        if !self.resource_names.is_empty() {
            parts.push(format!("ResourceNames:{}", q(&self.resource_names)));
        }
        if !self.non_resource_urls.is_empty() {
            parts.push(format!("NonResourceURLs:{}", q(&self.non_resource_urls)));
        }
        parts.push(format!("Verbs:{}", q(&self.verbs)));
        format!("{{{}}}", parts.join(", "))
    }
}

fn resource_matches(rule: &[String], resource: &str, sub: &str) -> bool {
    let combined = if sub.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{sub}")
    };
    rule.iter().any(|r| {
        r == "*" || *r == combined || (!sub.is_empty() && r.strip_prefix("*/") == Some(sub))
    })
}

fn url_matches(rule: &str, path: &str) -> bool {
    rule == "*"
        || rule == path
        || rule
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> Rule {
        Rule::from_json(&v)
    }

    fn req(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn matching_follows_upstream() {
        let r = rule(
            json!({"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}),
        );
        assert!(r.allows(&req("get", "", "pods", "", "p")));
        assert!(r.allows(&req("get", "", "pods", "log", "p")));
        assert!(!r.allows(&req("get", "", "pods", "status", "p")));
        assert!(!r.allows(&req("delete", "", "pods", "", "p")));
        assert!(!r.allows(&req("get", "apps", "pods", "", "p")));
        let r = rule(json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]}));
        assert!(r.allows(&req("patch", "steward.dev", "etcdclusters", "status", "c")));
        assert!(!r.allows(&req("patch", "steward.dev", "etcdclusters", "", "c")));
        let r = rule(
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["l"], "verbs": ["get"]}),
        );
        assert!(r.allows(&req("get", "coordination.k8s.io", "leases", "", "l")));
        assert!(!r.allows(&req("get", "coordination.k8s.io", "leases", "", "m")));
        assert!(!r.allows(&req("list", "coordination.k8s.io", "leases", "", "")));
        let r = rule(json!({"nonResourceURLs": ["/apis/*", "/version"], "verbs": ["get"]}));
        let mut a = req("get", "", "", "", "");
        a.resource_request = false;
        a.path = "/apis/apps/v1".into();
        assert!(r.allows(&a));
        a.path = "/api".into();
        assert!(!r.allows(&a));
    }

    #[test]
    fn coverage_breaks_rules_into_atoms() {
        let held = rule(
            json!({"apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get", "list"]}),
        );
        let named = rule(
            json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get"]}),
        );
        let held_refs = [&held, &named];
        assert!(rule(json!({"apiGroups": [""], "resources": ["pods", "services/status"], "verbs": ["get"]})).covered_by(&held_refs));
        assert!(
            !rule(json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}))
                .covered_by(&held_refs)
        );
        assert!(
            !rule(json!({"apiGroups": [""], "resources": ["pods", "services"], "verbs": ["get"]}))
                .covered_by(&held_refs)
        );
        assert!(rule(json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get"]})).covered_by(&held_refs));
        assert!(
            !rule(json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}))
                .covered_by(&held_refs)
        );
        assert_eq!(
            named.compact(),
            "{APIGroups:[\"\"], Resources:[\"secrets\"], ResourceNames:[\"a\"], Verbs:[\"get\"]}"
        );
    }
}
