//! A container's environment, built the way kubelet does: the runtime's defaults (PATH,
//! HOSTNAME), then `envFrom` sources, then `env` entries in order, each value `$(VAR)`-expanded
//! against what is defined before it; `valueFrom` reads Secrets, ConfigMaps and the downward API.

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

use super::fieldref;
use super::objects::{Kind, Objects};
use crate::expand::expand;

/// An ordered environment; setting an existing name replaces it in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Env(pub Vec<(String, String)>);

impl Env {
    pub fn set(&mut self, name: &str, value: String) {
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

/// Facts about the node needed for `resourceFieldRef`.
#[derive(Clone, Copy, Debug)]
pub struct NodeFacts {
    pub cpus: u64,
    pub memory_bytes: u64,
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || "-._".contains(c))
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// Builds the environment on top of `base`, or says why it cannot (kubelet's
/// `CreateContainerConfigError` messages).
pub fn build(
    pod: &Pod,
    container: &Container,
    pod_ip: &str,
    objects: &Objects,
    node: NodeFacts,
    base: Env,
) -> Result<Env, String> {
    let mut env = base;
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.clone().unwrap_or_default();
        let (kind, name, optional) = match (&source.secret_ref, &source.config_map_ref) {
            (Some(s), _) => (Kind::Secret, &s.name, s.optional.unwrap_or(false)),
            (None, Some(c)) => (Kind::ConfigMap, &c.name, c.optional.unwrap_or(false)),
            (None, None) => continue,
        };
        match objects.get(kind, name) {
            Some(data) => {
                for (k, v) in data {
                    let key = format!("{prefix}{k}");
                    if valid_env_name(&key) {
                        env.set(&key, String::from_utf8_lossy(v).into_owned());
                    }
                }
            }
            None if optional => {}
            None => return Err(format!("{} \"{name}\" not found", kind.lower())),
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(value) = value_of(var, pod, container, pod_ip, objects, node, &env)? {
            env.set(&var.name, value);
        }
    }
    Ok(env)
}

fn value_of(
    var: &EnvVar,
    pod: &Pod,
    container: &Container,
    pod_ip: &str,
    objects: &Objects,
    node: NodeFacts,
    env: &Env,
) -> Result<Option<String>, String> {
    let Some(from) = &var.value_from else {
        let raw = var.value.clone().unwrap_or_default();
        return Ok(Some(expand(&raw, |n| env.get(n).map(str::to_string))));
    };
    let ns = &objects.namespace;
    let key_ref = |kind: Kind, name: &str, key: &str, optional: bool| match objects.get(kind, name)
    {
        Some(data) => match data.get(key) {
            Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            None if optional => Ok(None),
            None => Err(format!(
                "couldn't find key {key} in {} {ns}/{name}",
                kind.title()
            )),
        },
        None if optional => Ok(None),
        None => Err(format!("{} \"{name}\" not found", kind.lower())),
    };
    if let Some(r) = &from.secret_key_ref {
        return key_ref(Kind::Secret, &r.name, &r.key, r.optional.unwrap_or(false));
    }
    if let Some(r) = &from.config_map_key_ref {
        return key_ref(
            Kind::ConfigMap,
            &r.name,
            &r.key,
            r.optional.unwrap_or(false),
        );
    }
    if let Some(f) = &from.field_ref {
        return fieldref::field(pod, &f.field_path, pod_ip).map(Some);
    }
    if let Some(r) = &from.resource_field_ref {
        return fieldref::resource(container, r, node.cpus, node.memory_bytes).map(Some);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVarSource, ObjectFieldSelector,
        SecretKeySelector,
    };
    use std::collections::HashMap;

    fn objects() -> Objects {
        let mut found = HashMap::new();
        found.insert(
            (Kind::Secret, "creds".to_string()),
            Some([("password".to_string(), b"s3cret".to_vec())].into()),
        );
        found.insert(
            (Kind::ConfigMap, "cfg".to_string()),
            Some(
                [
                    ("mode".to_string(), b"fast".to_vec()),
                    ("bad key".to_string(), b"x".to_vec()),
                ]
                .into(),
            ),
        );
        found.insert((Kind::ConfigMap, "gone".to_string()), None);
        Objects {
            namespace: "ns".into(),
            found,
        }
    }

    fn var(name: &str, value: Option<&str>, from: Option<EnvVarSource>) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: value.map(String::from),
            value_from: from,
        }
    }

    fn facts() -> NodeFacts {
        NodeFacts {
            cpus: 2,
            memory_bytes: 1 << 30,
        }
    }

    #[test]
    fn builds_env_in_kubelet_order() {
        let c = Container {
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "cfg".into(),
                    optional: None,
                }),
                prefix: Some("CFG_".into()),
                secret_ref: None,
            }]),
            env: Some(vec![
                var(
                    "POD_IP",
                    None,
                    Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "status.podIP".into(),
                            api_version: None,
                        }),
                        ..Default::default()
                    }),
                ),
                var(
                    "URL",
                    Some("http://$(POD_IP):2379 $(LATER) $$(POD_IP)"),
                    None,
                ),
                var(
                    "PW",
                    None,
                    Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "creds".into(),
                            key: "password".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                ),
                var(
                    "OPT",
                    None,
                    Some(EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "gone".into(),
                            key: "k".into(),
                            optional: Some(true),
                        }),
                        ..Default::default()
                    }),
                ),
                var("LATER", Some("x"), None),
            ]),
            ..Default::default()
        };
        let base = Env(vec![("PATH".into(), "/bin".into())]);
        let env = build(&Pod::default(), &c, "127.1.0.3", &objects(), facts(), base).unwrap();
        assert_eq!(
            env.0,
            vec![
                ("PATH".to_string(), "/bin".to_string()),
                ("CFG_mode".to_string(), "fast".to_string()),
                ("POD_IP".to_string(), "127.1.0.3".to_string()),
                (
                    "URL".to_string(),
                    "http://127.1.0.3:2379 $(LATER) $(POD_IP)".to_string()
                ),
                ("PW".to_string(), "s3cret".to_string()),
                ("LATER".to_string(), "x".to_string()),
            ]
        );
    }

    #[test]
    fn missing_objects_and_keys_are_config_errors() {
        let missing = |from: EnvVarSource| {
            let c = Container {
                env: Some(vec![var("X", None, Some(from))]),
                ..Default::default()
            };
            build(&Pod::default(), &c, "", &objects(), facts(), Env::default()).unwrap_err()
        };
        assert_eq!(
            missing(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: "nope".into(),
                    key: "k".into(),
                    optional: None
                }),
                ..Default::default()
            }),
            "secret \"nope\" not found"
        );
        assert_eq!(
            missing(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: "creds".into(),
                    key: "k".into(),
                    optional: None
                }),
                ..Default::default()
            }),
            "couldn't find key k in Secret ns/creds"
        );
        assert_eq!(
            missing(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: "gone".into(),
                    key: "k".into(),
                    optional: Some(false)
                }),
                ..Default::default()
            }),
            "configmap \"gone\" not found"
        );
    }
}
