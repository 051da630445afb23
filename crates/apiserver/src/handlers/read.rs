//! Reads: get, list (label/field selectors, `limit`/`continue` pagination, list
//! resourceVersion), and the entry point of watches. Lists are served from the current state:
//! `resourceVersionMatch=Exact` for an older RV, and continuing a paginated list after writes,
//! are approximated (see the docs).

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::{Request, Target, json_response, table};
use crate::meta;
use crate::selectors::{FieldSelector, LabelSelector, Selectors};
use crate::status::{ApiError, ApiResult};
use crate::watch::{self, WatchRequest};
use crate::write::to_version;

pub fn selectors(req: &Request, t: &Target) -> ApiResult<Selectors> {
    let labels = LabelSelector::parse(req.q("labelSelector").unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let mut fields = FieldSelector::parse(req.q("fieldSelector").unwrap_or_default(), &t.def)
        .map_err(ApiError::bad_request)?;
    if let Some(name) = &t.name {
        fields.0.push(("metadata.name".into(), true, name.clone()));
    }
    Ok(Selectors { labels, fields })
}

pub fn get(req: &Request, t: &Target) -> ApiResult<Response> {
    let state = req.server.lock();
    let obj = state
        .get(&t.def.gr(), t.ns(), t.name())
        .ok_or_else(|| ApiError::not_found(&t.def.gr(), t.name()))?;
    let obj = to_version(&t.def, obj);
    if t.sub.is_none() && table::wants_table(req.header("accept")) {
        let md = json!({"resourceVersion": meta::resource_version(&obj).unwrap_or_default()});
        return Ok(json_response(
            StatusCode::OK,
            &table::table(&t.def, &[obj], md, req.q("includeObject")),
        ));
    }
    Ok(json_response(StatusCode::OK, &obj))
}

fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    URL_SAFE_NO_PAD.encode(
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{ns}/{name}")}).to_string(),
    )
}

fn decode_continue(token: &str) -> ApiResult<(u64, String, String)> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let start = v.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    let (ns, name) = start.split_once('/').ok_or_else(bad)?;
    Ok((rv, ns.to_string(), name.to_string()))
}

pub fn list(req: &Request, t: &Target) -> ApiResult<Response> {
    let sel = selectors(req, t)?;
    let limit: usize = req.q("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let after = match req.q("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    let state = req.server.lock();
    if req.q("resourceVersionMatch") == Some("Exact")
        && let Some(rv) = req.q("resourceVersion").and_then(|r| r.parse::<u64>().ok())
        && rv != state.rv
    {
        return Err(ApiError::expired(format!(
            "too old resource version: {rv} ({}): this server only serves the current state",
            state.rv
        )));
    }
    let list_rv = after.as_ref().map_or(state.rv, |a| a.0);
    let mut items = Vec::new();
    let mut next = None;
    let mut remaining = 0u64;
    for obj in state.list_shared(&t.def.gr(), t.namespace.as_deref()) {
        let key = (
            meta::namespace(obj).unwrap_or_default().to_string(),
            meta::name(obj).unwrap_or_default().to_string(),
        );
        if let Some((_, ns, name)) = &after
            && key <= (ns.clone(), name.clone())
        {
            continue;
        }
        if !crate::selectors::matches_as(&sel, &t.def, obj) {
            continue;
        }
        if limit > 0 && items.len() >= limit {
            remaining += 1;
            continue;
        }
        if limit > 0 && items.len() + 1 == limit {
            next = Some(key);
        }
        items.push(obj.clone());
    }
    // Converting and serialising the items does not need the store.
    drop(state);
    let items: Vec<Value> = items.iter().map(|obj| to_version(&t.def, obj)).collect();
    let mut md = json!({"resourceVersion": list_rv.to_string()});
    if remaining > 0
        && let Some((ns, name)) = next
    {
        md["continue"] = json!(encode_continue(list_rv, &ns, &name));
        md["remainingItemCount"] = json!(remaining);
    }
    if table::wants_table(req.header("accept")) {
        return Ok(json_response(
            StatusCode::OK,
            &table::table(&t.def, &items, md, req.q("includeObject")),
        ));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": t.def.list_kind, "apiVersion": t.def.api_version(), "metadata": md, "items": items}),
    ))
}

pub fn watch(req: &Request, t: &Target) -> ApiResult<Response> {
    let sel = selectors(req, t)?;
    let timeout = req
        .q("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs);
    let send_initial = req.flag("sendInitialEvents");
    if send_initial && req.q("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::new(
            422,
            "Invalid",
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    let protobuf = match crate::proto::negotiate(req.header("accept")) {
        crate::proto::Negotiated::Json => false,
        crate::proto::Negotiated::Protobuf { json_ok } => {
            if crate::proto::supports(&t.def.api_version(), &t.def.kind) {
                true
            } else if json_ok {
                false
            } else {
                return Err(super::not_acceptable());
            }
        }
    };
    watch::start(
        req.server.clone(),
        WatchRequest {
            def: t.def.clone(),
            namespace: t.namespace.clone(),
            selectors: sel,
            resource_version: req.q("resourceVersion").map(String::from),
            send_initial_events: send_initial,
            bookmarks: req.flag("allowWatchBookmarks"),
            timeout,
            protobuf,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "ns", "a");
        assert_eq!(decode_continue(&t).unwrap(), (42, "ns".into(), "a".into()));
        assert!(decode_continue("garbage!").is_err());
    }
}
