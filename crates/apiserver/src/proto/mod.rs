//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) for built-in kinds, as the real
//! API server speaks it: request bodies are read, responses and watch streams are written when
//! the client prefers protobuf, and everything else is stored and served as JSON.
//!
//! The wire format comes from the Kubernetes `generated.proto` files (`proto/`, compiled by
//! `build.rs` into a descriptor set); [`json`] walks rust-protobuf's reflection of those
//! descriptors to translate between a message and the JSON object the rest of the server works
//! on. What is Steward's own here is only the envelope (the `k8s\0` magic and
//! `runtime.Unknown`), the watch framing and content negotiation:
//! * an object is `k8s\0` + `runtime.Unknown{typeMeta{apiVersion, kind}, raw: <message>}`;
//! * a watch stream is a sequence of frames, each a 4-byte big-endian length and a bare
//!   `meta.v1.WatchEvent` whose `object.raw` holds the enveloped object;
//! * custom resources have no protobuf form: a protobuf body is `415`; a request that accepts
//!   only protobuf is `406`, one that also accepts JSON gets JSON.

mod json;

use std::collections::HashMap;
use std::sync::LazyLock;

use protobuf::descriptor::FileDescriptorSet;
use protobuf::reflect::{FileDescriptor, MessageDescriptor, ReflectValueBox, ReflectValueRef};
use protobuf::{Message, MessageDyn};
use serde_json::Value;

pub use json::Error;

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The prefix of every enveloped object.
const MAGIC: [u8; 4] = [b'k', b'8', b's', 0];

/// Every message of the compiled definitions, by full protobuf name.
static MESSAGES: LazyLock<HashMap<String, MessageDescriptor>> = LazyLock::new(|| {
    let bytes: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.fds"));
    let files = FileDescriptorSet::parse_from_bytes(bytes)
        .and_then(|set| FileDescriptor::new_dynamic_fds(set.file, &[]));
    match files {
        Ok(files) => files
            .iter()
            .flat_map(|f| f.messages().collect::<Vec<_>>())
            .map(|m| (m.full_name().to_string(), m))
            .collect(),
        Err(e) => {
            tracing::error!(error = %e, "the Kubernetes protobuf definitions do not load; protobuf bodies are refused");
            HashMap::new()
        }
    }
});

/// A message of the compiled definitions (the envelope's own types).
fn message(full_name: &str) -> Result<MessageDescriptor, Error> {
    MESSAGES
        .get(full_name)
        .cloned()
        .ok_or_else(|| Error::new(format!("no protobuf message {full_name}")))
}

/// The protobuf package of an API group/version (the crate's packages drop upstream's `k8s.io.`).
fn package(group: &str, version: &str) -> String {
    match group {
        "" => format!("api.core.{version}"),
        "apiextensions.k8s.io" => {
            format!("apiextensions_apiserver.pkg.apis.apiextensions.{version}")
        }
        "meta.k8s.io" => format!("apimachinery.pkg.apis.meta.{version}"),
        g => format!("api.{}.{version}", g.split('.').next().unwrap_or(g)),
    }
}

/// The message of a kind: its group's, or a `meta.v1` kind any group version carries
/// (`Status`, `DeleteOptions`, `WatchEvent`, …).
pub fn descriptor(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if kind.is_empty() || version.is_empty() {
        return None;
    }
    MESSAGES
        .get(&format!("{}.{kind}", package(group, version)))
        .or_else(|| MESSAGES.get(&format!("apimachinery.pkg.apis.meta.v1.{kind}")))
        .cloned()
}

/// Whether a kind has a protobuf form.
pub fn supports(api_version: &str, kind: &str) -> bool {
    descriptor(api_version, kind).is_some()
}

/// Reads an enveloped object (a request body) as JSON, `apiVersion` and `kind` (from the
/// envelope) included.
pub fn decode(bytes: &[u8]) -> Result<Value, Error> {
    let unknown = envelope(bytes)?;
    let (api_version, kind) = with_message(&*unknown, "typeMeta", |t| {
        (get_str(t, "apiVersion"), get_str(t, "kind"))
    })
    .unwrap_or_default();
    let encoding = get_str(&*unknown, "contentEncoding");
    if !encoding.is_empty() {
        return Err(Error::new(format!(
            "content encoding {encoding:?} is not supported"
        )));
    }
    let content_type = get_str(&*unknown, "contentType");
    if !matches!(content_type.as_str(), "" | MEDIA_TYPE) {
        return Err(Error::new(format!(
            "content type {content_type:?} is not supported inside a protobuf envelope"
        )));
    }
    let desc = descriptor(&api_version, &kind).ok_or_else(|| {
        Error::no_form(format!(
            "no protobuf message for {api_version}, Kind={kind}"
        ))
    })?;
    let message = desc
        .parse_from_bytes(&get_bytes(&*unknown, "raw"))
        .map_err(|e| Error::new(format!("invalid {kind} message: {e}")))?;
    let mut obj = json::to_json(&*message)?;
    if let Value::Object(map) = &mut obj {
        map.insert("apiVersion".into(), Value::String(api_version));
        map.insert("kind".into(), Value::String(kind));
    }
    Ok(obj)
}

/// The `runtime.Unknown` after the magic prefix.
fn envelope(bytes: &[u8]) -> Result<Box<dyn MessageDyn>, Error> {
    let raw = bytes
        .strip_prefix(&MAGIC)
        .ok_or_else(|| Error::new("the protobuf body does not start with the k8s magic prefix"))?;
    message(UNKNOWN)?
        .parse_from_bytes(raw)
        .map_err(|e| Error::new(format!("invalid protobuf envelope: {e}")))
}

const UNKNOWN: &str = "apimachinery.pkg.runtime.Unknown";
const TYPE_META: &str = "apimachinery.pkg.runtime.TypeMeta";
const RAW_EXTENSION: &str = "apimachinery.pkg.runtime.RawExtension";
const WATCH_EVENT: &str = "apimachinery.pkg.apis.meta.v1.WatchEvent";

/// `f` of the message in `field`, when set.
fn with_message<T>(
    msg: &dyn MessageDyn,
    field: &str,
    f: impl FnOnce(&dyn MessageDyn) -> T,
) -> Option<T> {
    let fd = msg.descriptor_dyn().field_by_name(field)?;
    match fd.get_singular(msg)? {
        ReflectValueRef::Message(m) => Some(f(&*m)),
        _ => None,
    }
}

fn get_str(msg: &dyn MessageDyn, field: &str) -> String {
    msg.descriptor_dyn()
        .field_by_name(field)
        .and_then(|f| f.get_singular(msg))
        .and_then(|v| v.to_str().map(String::from))
        .unwrap_or_default()
}

fn get_bytes(msg: &dyn MessageDyn, field: &str) -> Vec<u8> {
    msg.descriptor_dyn()
        .field_by_name(field)
        .and_then(|f| f.get_singular(msg))
        .and_then(|v| v.to_bytes().map(<[u8]>::to_vec))
        .unwrap_or_default()
}

fn set(msg: &mut dyn MessageDyn, field: &str, value: ReflectValueBox) -> Result<(), Error> {
    let f = msg
        .descriptor_dyn()
        .field_by_name(field)
        .ok_or_else(|| Error::new(format!("no field {field}")))?;
    f.set_singular_field(msg, value);
    Ok(())
}

/// Writes a JSON object (with `apiVersion` and `kind`) enveloped; `None` when its kind has no
/// protobuf form.
pub fn encode(obj: &Value) -> Option<Result<Vec<u8>, Error>> {
    let api_version = obj.get("apiVersion")?.as_str()?;
    let kind = obj.get("kind")?.as_str()?;
    let desc = descriptor(api_version, kind)?;
    Some(encode_as(&desc, api_version, kind, obj))
}

fn encode_as(
    desc: &MessageDescriptor,
    api_version: &str,
    kind: &str,
    obj: &Value,
) -> Result<Vec<u8>, Error> {
    let object = json::from_json(desc, obj)?;
    let mut type_meta = message(TYPE_META)?.new_instance();
    set(
        &mut *type_meta,
        "apiVersion",
        ReflectValueBox::String(api_version.into()),
    )?;
    set(
        &mut *type_meta,
        "kind",
        ReflectValueBox::String(kind.into()),
    )?;
    let mut unknown = message(UNKNOWN)?.new_instance();
    set(
        &mut *unknown,
        "typeMeta",
        ReflectValueBox::Message(type_meta),
    )?;
    let raw = object.write_to_bytes_dyn().map_err(Error::wire)?;
    set(&mut *unknown, "raw", ReflectValueBox::Bytes(raw))?;
    let mut out = MAGIC.to_vec();
    out.extend(unknown.write_to_bytes_dyn().map_err(Error::wire)?);
    Ok(out)
}

/// One frame of a protobuf watch stream from one JSON watch event (`{"type","object"}`).
pub fn watch_frame(event: &Value) -> Result<Vec<u8>, Error> {
    let etype = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let object = event.get("object").unwrap_or(&Value::Null);
    // An object whose kind has no protobuf form is carried as JSON inside the frame.
    let raw = match encode(object) {
        Some(encoded) => encoded?,
        None => object.to_string().into_bytes(),
    };
    let mut ext = message(RAW_EXTENSION)?.new_instance();
    set(&mut *ext, "raw", ReflectValueBox::Bytes(raw))?;
    let mut wire = message(WATCH_EVENT)?.new_instance();
    set(&mut *wire, "type", ReflectValueBox::String(etype.into()))?;
    set(&mut *wire, "object", ReflectValueBox::Message(ext))?;
    let body = wire.write_to_bytes_dyn().map_err(Error::wire)?;
    let len = u32::try_from(body.len()).map_err(|_| Error::new("watch event too large"))?;
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// What a response is written in, from the request's `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiated {
    /// JSON (or what the handler chose: tables, YAML requests answered in JSON).
    Json,
    /// Protobuf preferred; `json_ok` when a later clause also accepts JSON (the answer for a
    /// kind without a protobuf form).
    Protobuf { json_ok: bool },
}

/// Content negotiation as apimachinery's: the clauses by `q` (stable), the first the server
/// can produce wins. Clauses that ask for a conversion (`as=Table`, …) are the handlers' own
/// and leave the answer JSON.
pub fn negotiate(accept: Option<&str>) -> Negotiated {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Negotiated::Json;
    };
    let mut clauses: Vec<(f32, &str, bool)> = accept
        .split(',')
        .map(|part| {
            let mut it = part.split(';');
            let media = it.next().unwrap_or_default().trim();
            let mut q = 1.0;
            let mut converts = false;
            for p in it {
                let p = p.trim();
                if let Some(v) = p.strip_prefix("q=") {
                    q = v.parse::<f32>().unwrap_or(1.0);
                } else if p.starts_with("as=") {
                    converts = true;
                }
            }
            (q, media, converts)
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0));
    let json_like = |m: &str| {
        matches!(
            m,
            "application/json" | "application/yaml" | "*/*" | "application/*" | ""
        )
    };
    for (i, (_, media, converts)) in clauses.iter().enumerate() {
        if *converts {
            return Negotiated::Json;
        }
        if *media == MEDIA_TYPE {
            let json_ok = clauses[i + 1..].iter().any(|(_, m, _)| json_like(m));
            return Negotiated::Protobuf { json_ok };
        }
        if json_like(media) {
            return Negotiated::Json;
        }
    }
    Negotiated::Json
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_definitions_load() {
        assert!(MESSAGES.len() > 500, "{} messages", MESSAGES.len());
        assert!(message(UNKNOWN).is_ok() && message(WATCH_EVENT).is_ok());
    }

    #[test]
    fn objects_round_trip_through_the_wire_format() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"},
                "creationTimestamp": "2026-11-25T10:00:00Z", "resourceVersion": "7",
                "managedFields": [{"manager": "m", "operation": "Apply", "apiVersion": "v1",
                    "time": "2026-11-25T10:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}}}]},
            "spec": {"containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                "readinessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 5},
                "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}],
                "volumes": [{"name": "v", "configMap": {"name": "cm", "defaultMode": 420}}],
                "terminationGracePeriodSeconds": 0},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}
        });
        let wire = encode(&pod)
            .expect("Pod has a protobuf form")
            .expect("encodes");
        assert_eq!(&wire[..4], b"k8s\0");
        assert_eq!(decode(&wire).expect("decodes"), pod);
    }

    #[test]
    fn bytes_int_or_string_and_slices_keep_their_json_shapes() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s"}, "data": {"k": "aGk="}, "type": "Opaque"});
        let wire = encode(&secret).expect("form").expect("encodes");
        assert_eq!(decode(&wire).expect("decodes"), secret);
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "metadata": {}, "spec": {"token": "t"},
            "status": {"user": {"username": "u", "extra": {"x": ["1", "2"]}}}});
        let wire = encode(&review).expect("form").expect("encodes");
        assert_eq!(decode(&wire).expect("decodes"), review);
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 81, "targetPort": "web"}]}});
        let wire = encode(&svc).expect("form").expect("encodes");
        assert_eq!(decode(&wire).expect("decodes"), svc);
    }

    #[test]
    fn crd_schemas_keep_their_json_spelling() {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "ws.x.dev"},
            "spec": {"group": "x.dev", "scope": "Namespaced",
                "names": {"plural": "ws", "kind": "W"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "open": {"type": "object", "additionalProperties": true},
                        "list": {"type": "array", "items": {"type": "integer", "default": 3},
                            "x-kubernetes-list-type": "set"},
                        "mode": {"type": "string", "enum": ["a", "b"]}},
                    "x-kubernetes-validations": [{"rule": "self.x == 1"}]}}}]}});
        let wire = encode(&crd).expect("form").expect("encodes");
        assert_eq!(decode(&wire).expect("decodes"), crd);
    }

    #[test]
    fn custom_kinds_have_no_protobuf_form_and_bad_bodies_are_errors() {
        assert!(
            encode(&json!({"apiVersion": "steward.dev/v1alpha1", "kind": "EtcdCluster"})).is_none()
        );
        assert!(decode(b"{\"kind\":\"Pod\"}").is_err());
        assert!(decode(b"k8s\0\xff\xff").is_err());
        // Status is a meta kind any group version carries.
        assert!(supports("apps/v1", "Status") && supports("v1", "DeleteOptions"));
    }

    #[test]
    fn negotiation_follows_preference_and_skips_conversions() {
        assert_eq!(negotiate(None), Negotiated::Json);
        assert_eq!(
            negotiate(Some(
                "application/vnd.kubernetes.protobuf, application/json"
            )),
            Negotiated::Protobuf { json_ok: true }
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf")),
            Negotiated::Protobuf { json_ok: false }
        );
        assert_eq!(
            negotiate(Some(
                "application/json;q=0.9, application/vnd.kubernetes.protobuf"
            )),
            Negotiated::Protobuf { json_ok: true }
        );
        assert_eq!(
            negotiate(Some(
                "application/json, application/vnd.kubernetes.protobuf"
            )),
            Negotiated::Json
        );
        assert_eq!(
            negotiate(Some(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
            )),
            Negotiated::Json
        );
    }

    #[test]
    fn watch_frames_are_length_prefixed_events_with_enveloped_objects() {
        let event = json!({"type": "ADDED", "object": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"a": ""}}});
        let frame = watch_frame(&event).expect("frame");
        let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(len, frame.len() - 4);
        let wire = message(WATCH_EVENT)
            .and_then(|d| d.parse_from_bytes(&frame[4..]).map_err(Error::wire))
            .expect("event");
        assert_eq!(get_str(&*wire, "type"), "ADDED");
        let raw = with_message(&*wire, "object", |o| get_bytes(o, "raw")).expect("object");
        let object = decode(&raw).expect("object");
        assert_eq!(object, event["object"]);
    }
}
