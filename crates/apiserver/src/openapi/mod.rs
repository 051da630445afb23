//! OpenAPI documents as a real API server serves them: the v3 index (`/openapi/v3`), one v3
//! document per group-version (`/openapi/v3/apis/apps/v1`) and the v2 document (`/openapi/v2`,
//! derived from the v3 documents). Built-in kinds' schemas come from `k8s-openapi` (see
//! `builtin`); a CRD's from the served version's `openAPIV3Schema`, so a document changes (and
//! its hash with it) whenever a CRD of its group-version does. Documents are pure functions of
//! the registry; `fields` checks request bodies against the same schemas.

mod builtin;
pub mod fields;
mod paths;
pub mod proto;
mod v2;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use crate::auth::reviews;
use crate::registry::{Registry, ResourceDef};

pub use v2::document as v2_document;

const SCHEMAS: &str = "#/components/schemas/";
const OBJECT_META: &str = builtin::OBJECT_META;

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DOC: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// What one group-version document describes.
#[derive(Default)]
pub struct GroupVersion {
    pub group: String,
    pub version: String,
    pub defs: Vec<Arc<ResourceDef>>,
    /// Create-only review endpoints: (plural, kind, namespaced).
    pub reviews: Vec<(&'static str, &'static str, bool)>,
}

/// `api/v1` or `apis/{group}/{version}`, the key of the index and the URL suffix.
pub fn key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Every group-version the server serves, by index key.
pub fn group_versions(registry: &Registry) -> BTreeMap<String, GroupVersion> {
    let mut out: BTreeMap<String, GroupVersion> = BTreeMap::new();
    fn entry<'a>(
        out: &'a mut BTreeMap<String, GroupVersion>,
        group: &str,
        version: &str,
    ) -> &'a mut GroupVersion {
        out.entry(key(group, version))
            .or_insert_with(|| GroupVersion {
                group: group.to_string(),
                version: version.to_string(),
                ..GroupVersion::default()
            })
    }
    for def in registry.all() {
        entry(&mut out, &def.group, &def.version)
            .defs
            .push(def.clone());
    }
    for (group, plural, kind, namespaced) in reviews::DISCOVERY {
        entry(&mut out, group, "v1")
            .reviews
            .push((plural, kind, namespaced));
    }
    for gv in out.values_mut() {
        gv.defs.sort_by(|a, b| a.plural.cmp(&b.plural));
    }
    out
}

/// A serialized document and its hash (upper-case hex SHA-512, as upstream's ETag).
pub struct Serialized {
    pub body: Vec<u8>,
    pub hash: String,
}

pub fn serialize(doc: &Value) -> Serialized {
    hashed(doc.to_string().into_bytes())
}

/// Bytes with their hash.
pub fn hashed(body: Vec<u8>) -> Serialized {
    let hash = Sha512::digest(&body)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    Serialized { body, hash }
}

/// The component name upstream gives a custom kind: the reversed group, version, kind
/// (`dev.steward.v1alpha1.EtcdCluster`).
pub fn crd_component(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "kind": kind, "version": version}])
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("{SCHEMAS}{name}")})
}

/// `{"allOf": [{"$ref": ...}], ...}`: a reference with siblings, as upstream writes it in v3.
fn reference_with(name: &str, extra: Value) -> Value {
    let mut v = json!({"allOf": [reference(name)]});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v
}

/// Component names of the kinds a group-version document describes, by (group, version, kind).
pub struct Names {
    pub kinds: BTreeMap<(String, String, String), String>,
}

impl Names {
    pub fn get(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.kinds
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
            .map(String::as_str)
    }
}

/// The subresource kinds (group, version, kind) a definition's paths refer to.
fn subresource_kinds(def: &ResourceDef) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut out = Vec::new();
    if def.scale.is_some() {
        out.push(("autoscaling", "v1", "Scale"));
    }
    for (_, kind, _) in &def.extra_subresources {
        match *kind {
            "Eviction" => out.push(("policy", "v1", "Eviction")),
            "Binding" => out.push(("", "v1", "Binding")),
            "TokenRequest" => out.push(("authentication.k8s.io", "v1", "TokenRequest")),
            _ => {}
        }
    }
    out
}

/// The schema of a custom kind: its `openAPIV3Schema` with `apiVersion`, `kind` and `metadata`
/// (a reference to ObjectMeta) set, and the group-version-kind extension.
pub fn crd_schema(def: &ResourceDef) -> Value {
    let mut schema = def
        .schema
        .as_deref()
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"type": "object"}));
    if let Some(o) = schema.as_object_mut() {
        let props = o
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(props) = props {
            props.insert(
                "apiVersion".into(),
                json!({"type": "string", "description": API_VERSION_DOC}),
            );
            props.insert(
                "kind".into(),
                json!({"type": "string", "description": KIND_DOC}),
            );
            props.insert(
                "metadata".into(),
                reference_with(builtin::OBJECT_META, json!({"description": METADATA_DOC})),
            );
        }
        o.insert(
            "x-kubernetes-group-version-kind".into(),
            gvk(&def.group, &def.version, &def.kind),
        );
    }
    schema
}

fn list_schema(item: &str, group: &str, version: &str, list_kind: &str, kind: &str) -> Value {
    json!({
        "description": format!("{list_kind} is a list of {kind}"),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DOC},
            "items": {"type": "array", "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", kind.to_lowercase()),
                "items": reference_with(item, json!({"default": {}}))},
            "kind": {"type": "string", "description": KIND_DOC},
            "metadata": reference_with(builtin::LIST_META, json!({"default": {}, "description": LIST_METADATA_DOC})),
        },
        "x-kubernetes-group-version-kind": gvk(group, version, list_kind),
    })
}

/// The components (`components.schemas`) of one group-version and the names of its kinds.
pub fn components(gv: &GroupVersion) -> (Map<String, Value>, Names) {
    let mut generator = SchemaSettings::openapi3().into_generator();
    builtin::register_meta(&mut generator);
    let mut registered: Vec<((String, String, String), String)> = Vec::new();
    let mut builtin_kinds = |g: &str, v: &str, k: &str, generator: &mut _| {
        if let Some(name) = builtin::register(generator, g, v, k) {
            registered.push(((g.to_string(), v.to_string(), k.to_string()), name));
        }
    };
    for def in gv.defs.iter().filter(|d| !d.is_custom()) {
        builtin_kinds(&def.group, &def.version, &def.kind, &mut generator);
        for (g, v, k) in subresource_kinds(def) {
            builtin_kinds(g, v, k, &mut generator);
        }
    }
    for (_, kind, _) in &gv.reviews {
        builtin_kinds(&gv.group, &gv.version, kind, &mut generator);
    }
    let mut schemas = generator.take_definitions(true);
    builtin::add_list_markers(&mut schemas);
    let mut names = Names {
        kinds: BTreeMap::new(),
    };
    for ((g, v, k), name) in registered {
        if let Some(o) = schemas.get_mut(&name).and_then(Value::as_object_mut) {
            o.insert("x-kubernetes-group-version-kind".into(), gvk(&g, &v, &k));
            // k8s-openapi marks `metadata` required because its Rust field is not optional;
            // upstream's schemas do not.
            if let Some(Value::Array(req)) = o.get_mut("required") {
                req.retain(|r| r != "metadata");
                if req.is_empty() {
                    o.remove("required");
                }
            }
        }
        names.kinds.insert((g, v, k), name);
    }
    for def in &gv.defs {
        let (name, item) = if def.is_custom() {
            let name = crd_component(&def.group, &def.version, &def.kind);
            schemas.insert(name.clone(), crd_schema(def));
            names.kinds.insert(
                (def.group.clone(), def.version.clone(), def.kind.clone()),
                name.clone(),
            );
            (
                crd_component(&def.group, &def.version, &def.list_kind),
                name,
            )
        } else {
            let Some(item) = names.get(&def.group, &def.version, &def.kind) else {
                continue;
            };
            (format!("{item}List"), item.to_string())
        };
        schemas.insert(
            name.clone(),
            list_schema(&item, &def.group, &def.version, &def.list_kind, &def.kind),
        );
        names.kinds.insert(
            (
                def.group.clone(),
                def.version.clone(),
                def.list_kind.clone(),
            ),
            name,
        );
    }
    (schemas, names)
}

/// The v3 document of one group-version.
pub fn v3_document(gv: &GroupVersion) -> Value {
    let (schemas, names) = components(gv);
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::handlers::discovery::GIT_VERSION},
        "paths": paths::paths(gv, &names),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        },
        "security": [{"BearerToken": []}],
    })
}

/// The serialized v3 document of a group-version. Documents of group-versions without custom
/// kinds never change (built-in kinds are fixed at start), so they are made once per process.
pub fn v3_serialized(gv: &GroupVersion) -> Arc<Serialized> {
    if gv.defs.iter().any(|d| d.is_custom()) {
        return Arc::new(serialize(&v3_document(gv)));
    }
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Serialized>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let key = key(&gv.group, &gv.version);
    if let Some(doc) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return doc.clone();
    }
    let doc = Arc::new(serialize(&v3_document(gv)));
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, doc.clone());
    doc
}

/// Every built-in component and the names of the built-in kinds, for checking request bodies.
pub struct Builtins {
    pub schemas: Map<String, Value>,
    pub names: Names,
}

pub fn builtins() -> &'static Builtins {
    static ALL: OnceLock<Builtins> = OnceLock::new();
    ALL.get_or_init(|| {
        let registry = Registry::with_builtins();
        let mut all = Builtins {
            schemas: Map::new(),
            names: Names {
                kinds: BTreeMap::new(),
            },
        };
        for gv in group_versions(&registry).into_values() {
            let (schemas, names) = components(&gv);
            all.schemas.extend(schemas);
            all.names.kinds.extend(names.kinds);
        }
        all
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_apps_documents_name_schemas_as_upstream() {
        let gvs = group_versions(&Registry::with_builtins());
        let core = v3_document(&gvs["api/v1"]);
        let pod = &core["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "Pod", "version": "v1"}])
        );
        assert!(pod.get("required").is_none(), "{pod}");
        assert_eq!(
            pod["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
        let containers = &core["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]
            ["containers"];
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        assert!(core["components"]["schemas"]["io.k8s.api.core.v1.PodList"].is_object());
        let apps = v3_document(&gvs["apis/apps/v1"]);
        assert!(apps["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());
        assert!(apps["components"]["schemas"]["io.k8s.api.autoscaling.v1.Scale"].is_object());
        assert!(
            apps["components"]["schemas"]
                .get("io.k8s.api.core.v1.Pod")
                .is_none()
        );
    }

    #[test]
    fn crd_component_names_reverse_the_group() {
        assert_eq!(
            crd_component("steward.dev", "v1alpha1", "EtcdCluster"),
            "dev.steward.v1alpha1.EtcdCluster"
        );
    }
}
