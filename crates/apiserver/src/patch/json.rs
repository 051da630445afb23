//! JSON patch, RFC 6902 (`add`, `remove`, `replace`, `move`, `copy`, `test`) with JSON pointers
//! (RFC 6901, `~0`/`~1` escapes, `-` for the end of an array). Operations apply in order on a
//! copy; the first failure aborts the whole patch.

use serde_json::Value;

#[derive(Debug, PartialEq)]
pub enum JsonPatchError {
    /// Malformed patch document (400).
    BadRequest(String),
    /// A path that does not exist or a failed `test` (422).
    Invalid(String),
}

fn parse_pointer(p: &str) -> Result<Vec<String>, JsonPatchError> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(JsonPatchError::BadRequest(format!(
            "invalid JSON pointer {p:?}"
        )));
    };
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for p in path {
        cur = match cur {
            Value::Object(m) => m.get(p)?,
            Value::Array(a) => a.get(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn parent_mut<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, JsonPatchError> {
    let mut cur = doc;
    for p in path {
        cur = match cur {
            Value::Object(m) => m.get_mut(p),
            Value::Array(a) => p.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| {
            JsonPatchError::Invalid(format!("doc is missing path: /{}", path.join("/")))
        })?;
    }
    Ok(cur)
}

fn missing(path: &[String]) -> JsonPatchError {
    JsonPatchError::Invalid(format!("doc is missing path: \"/{}\"", path.join("/")))
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), JsonPatchError> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parent)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>().map_err(|_| missing(path))?
            };
            if i > a.len() {
                return Err(missing(path));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(missing(path)),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, JsonPatchError> {
    let Some((last, parent)) = path.split_last() else {
        return Ok(std::mem::take(doc));
    };
    match parent_mut(doc, parent)? {
        Value::Object(m) => m.remove(last).ok_or_else(|| missing(path)),
        Value::Array(a) => {
            let i = last.parse::<usize>().map_err(|_| missing(path))?;
            if i >= a.len() {
                return Err(missing(path));
            }
            Ok(a.remove(i))
        }
        _ => Err(missing(path)),
    }
}

pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, JsonPatchError> {
    let ops = patch.as_array().ok_or_else(|| {
        JsonPatchError::BadRequest("json patch must be an array of operations".into())
    })?;
    let mut doc = doc.clone();
    for op in ops {
        let name = op.get("op").and_then(Value::as_str).unwrap_or_default();
        let path = parse_pointer(op.get("path").and_then(Value::as_str).unwrap_or_default())?;
        let value = || {
            op.get("value").cloned().ok_or_else(|| {
                JsonPatchError::BadRequest(format!("missing value for {name} operation"))
            })
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    JsonPatchError::BadRequest(format!("missing from for {name} operation"))
                })
                .and_then(parse_pointer)
        };
        match name {
            "add" => add(&mut doc, &path, value()?)?,
            "remove" => {
                remove(&mut doc, &path)?;
            }
            "replace" => {
                let v = value()?;
                if get(&doc, &path).is_none() {
                    return Err(missing(&path));
                }
                remove(&mut doc, &path)?;
                add(&mut doc, &path, v)?;
            }
            "move" => {
                let f = from()?;
                let v = remove(&mut doc, &f)?;
                add(&mut doc, &path, v)?;
            }
            "copy" => {
                let f = from()?;
                let v = get(&doc, &f).cloned().ok_or_else(|| missing(&f))?;
                add(&mut doc, &path, v)?;
            }
            "test" => {
                let v = value()?;
                // As the real API server (evanphx/json-patch): a missing path tests equal to
                // null. kube-runtime's finalizer() relies on this when adding a first finalizer.
                let equal = match get(&doc, &path) {
                    Some(current) => *current == v,
                    None => v.is_null(),
                };
                if !equal {
                    return Err(JsonPatchError::Invalid(format!(
                        "testing value /{} failed",
                        path.join("/")
                    )));
                }
            }
            other => {
                return Err(JsonPatchError::BadRequest(format!(
                    "unexpected operation {other:?}"
                )));
            }
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operations() {
        let doc = json!({"a": {"b": [1, 2]}, "x~/y": 1});
        let out = json_patch(
            &doc,
            &json!([
                {"op": "add", "path": "/a/b/-", "value": 3},
                {"op": "add", "path": "/a/b/0", "value": 0},
                {"op": "replace", "path": "/x~0~1y", "value": 2},
                {"op": "copy", "from": "/a/b", "path": "/c"},
                {"op": "move", "from": "/c", "path": "/d"},
                {"op": "remove", "path": "/a/b/1"},
                {"op": "test", "path": "/d/3", "value": 3}
            ]),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"a": {"b": [0, 2, 3]}, "x~/y": 2, "d": [0, 1, 2, 3]})
        );
    }

    #[test]
    fn failures() {
        let doc = json!({"a": 1});
        assert!(matches!(
            json_patch(&doc, &json!([{"op": "test", "path": "/a", "value": 2}])),
            Err(JsonPatchError::Invalid(_))
        ));
        assert!(matches!(
            json_patch(&doc, &json!([{"op": "remove", "path": "/b"}])),
            Err(JsonPatchError::Invalid(_))
        ));
        assert!(matches!(
            json_patch(&doc, &json!({"op": "x"})),
            Err(JsonPatchError::BadRequest(_))
        ));
        assert!(matches!(
            json_patch(&doc, &json!([{"op": "frob", "path": "/a"}])),
            Err(JsonPatchError::BadRequest(_))
        ));
    }
}
