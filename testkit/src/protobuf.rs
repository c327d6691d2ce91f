//! Decodes the `k8s\0` protobuf envelope (runtime.Unknown) of a ConfigMap, Namespace,
//! PodDisruptionBudget or Eviction into its JSON form; enough for `kubectl create configmap`,
//! `kubectl create namespace`, `kubectl create pdb` and `kubectl drain`'s evictions.

use serde_json::{json, Map, Value};

const MAGIC: &[u8] = b"k8s\0";

pub(crate) enum Error {
    UnsupportedKind(String),
    Malformed(String),
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, Error> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf
            .get(*pos)
            .ok_or_else(|| Error::Malformed("truncated varint".to_string()))?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Error::Malformed("varint too long".to_string()))
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, Error> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let wire = match key & 7 {
            0 => Wire::Varint(varint(buf, &mut pos)?),
            1 | 5 => {
                pos += if key & 7 == 1 { 8 } else { 4 };
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?)
                    .map_err(|_| Error::Malformed("length overflow".to_string()))?;
                let bytes = buf
                    .get(pos..pos + len)
                    .ok_or_else(|| Error::Malformed("truncated field".to_string()))?;
                pos += len;
                Wire::Bytes(bytes)
            }
            other => return Err(Error::Malformed(format!("unsupported wire type {other}"))),
        };
        out.push((key >> 3, wire));
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<String, Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::Malformed("invalid UTF-8".to_string()))
}

/// A `map<string, string>` (or bytes, base64-encoded) entry.
fn map_entry(bytes: &[u8], base64_values: bool) -> Result<(String, Value), Error> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for (field, wire) in fields(bytes)? {
        match (field, wire) {
            (1, Wire::Bytes(b)) => key = text(b)?,
            (2, Wire::Bytes(b)) if base64_values => value = json!(base64_encode(b)),
            (2, Wire::Bytes(b)) => value = json!(text(b)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn insert_map_entry(
    obj: &mut Value,
    field: &str,
    bytes: &[u8],
    base64_values: bool,
) -> Result<(), Error> {
    let (key, value) = map_entry(bytes, base64_values)?;
    if !obj.get(field).is_some_and(Value::is_object) {
        obj[field] = json!({});
    }
    obj[field][key] = value;
    Ok(())
}

fn push_string(obj: &mut Value, field: &str, bytes: &[u8]) -> Result<(), Error> {
    if !obj.get(field).is_some_and(Value::is_array) {
        obj[field] = json!([]);
    }
    if let Some(items) = obj[field].as_array_mut() {
        items.push(json!(text(bytes)?));
    }
    Ok(())
}

fn owner_reference(bytes: &[u8]) -> Result<Value, Error> {
    let mut owner = Map::new();
    for (field, wire) in fields(bytes)? {
        let name = match field {
            1 => "kind",
            3 => "name",
            4 => "uid",
            5 => "apiVersion",
            6 => "controller",
            7 => "blockOwnerDeletion",
            _ => continue,
        };
        match wire {
            Wire::Bytes(b) => owner.insert(name.to_string(), json!(text(b)?)),
            Wire::Varint(v) => owner.insert(name.to_string(), json!(v != 0)),
            Wire::Fixed => None,
        };
    }
    Ok(Value::Object(owner))
}

/// ObjectMeta; timestamps and managedFields are dropped (the server sets or drops them).
fn object_meta(bytes: &[u8]) -> Result<Value, Error> {
    let mut meta = json!({});
    for (field, wire) in fields(bytes)? {
        match (field, wire) {
            // Go marshals empty strings too; JSON would omit them.
            (_, Wire::Bytes([])) => {}
            (1, Wire::Bytes(b)) => meta["name"] = json!(text(b)?),
            (2, Wire::Bytes(b)) => meta["generateName"] = json!(text(b)?),
            (3, Wire::Bytes(b)) => meta["namespace"] = json!(text(b)?),
            (5, Wire::Bytes(b)) => meta["uid"] = json!(text(b)?),
            (6, Wire::Bytes(b)) => meta["resourceVersion"] = json!(text(b)?),
            (11, Wire::Bytes(b)) => insert_map_entry(&mut meta, "labels", b, false)?,
            (12, Wire::Bytes(b)) => insert_map_entry(&mut meta, "annotations", b, false)?,
            (13, Wire::Bytes(b)) => {
                if !meta.get("ownerReferences").is_some_and(Value::is_array) {
                    meta["ownerReferences"] = json!([]);
                }
                let owner = owner_reference(b)?;
                if let Some(items) = meta["ownerReferences"].as_array_mut() {
                    items.push(owner);
                }
            }
            (14, Wire::Bytes(b)) => push_string(&mut meta, "finalizers", b)?,
            _ => {}
        }
    }
    Ok(meta)
}

fn configmap(bytes: &[u8]) -> Result<Value, Error> {
    let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    for (field, wire) in fields(bytes)? {
        match (field, wire) {
            (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
            (2, Wire::Bytes(b)) => insert_map_entry(&mut obj, "data", b, false)?,
            (3, Wire::Bytes(b)) => insert_map_entry(&mut obj, "binaryData", b, true)?,
            (4, Wire::Varint(v)) => obj["immutable"] = json!(v != 0),
            _ => {}
        }
    }
    Ok(obj)
}

fn namespace(bytes: &[u8]) -> Result<Value, Error> {
    let mut obj = json!({"apiVersion": "v1", "kind": "Namespace"});
    for (field, wire) in fields(bytes)? {
        match (field, wire) {
            (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
            (2, Wire::Bytes(b)) => {
                let mut spec = json!({});
                for (field, wire) in fields(b)? {
                    if let (1, Wire::Bytes(f)) = (field, wire) {
                        push_string(&mut spec, "finalizers", f)?;
                    }
                }
                obj["spec"] = spec;
            }
            _ => {}
        }
    }
    Ok(obj)
}

/// intstr.IntOrString.
fn int_or_string(bytes: &[u8]) -> Result<Value, Error> {
    let (mut is_string, mut int, mut string) = (false, 0i64, String::new());
    for (field, wire) in fields(bytes)? {
        match (field, wire) {
            (1, Wire::Varint(v)) => is_string = v == 1,
            (2, Wire::Varint(v)) => int = i64::from(v as i32),
            (3, Wire::Bytes(b)) => string = text(b)?,
            _ => {}
        }
    }
    Ok(if is_string { json!(string) } else { json!(int) })
}

/// metav1.LabelSelector.
fn label_selector(bytes: &[u8]) -> Result<Value, Error> {
    let mut selector = json!({});
    for (field, wire) in fields(bytes)? {
        match (field, wire) {
            (1, Wire::Bytes(b)) => insert_map_entry(&mut selector, "matchLabels", b, false)?,
            (2, Wire::Bytes(b)) => {
                let mut expr = json!({});
                for (field, wire) in fields(b)? {
                    match (field, wire) {
                        (1, Wire::Bytes(k)) => expr["key"] = json!(text(k)?),
                        (2, Wire::Bytes(o)) => expr["operator"] = json!(text(o)?),
                        (3, Wire::Bytes(v)) => push_string(&mut expr, "values", v)?,
                        _ => {}
                    }
                }
                if !selector
                    .get("matchExpressions")
                    .is_some_and(Value::is_array)
                {
                    selector["matchExpressions"] = json!([]);
                }
                if let Some(items) = selector["matchExpressions"].as_array_mut() {
                    items.push(expr);
                }
            }
            _ => {}
        }
    }
    Ok(selector)
}

/// policy/v1 PodDisruptionBudget (`kubectl create pdb`); the status is dropped (a create
/// resets it).
fn pod_disruption_budget(bytes: &[u8]) -> Result<Value, Error> {
    let mut obj = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget"});
    for (field, wire) in fields(bytes)? {
        match (field, wire) {
            (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
            (2, Wire::Bytes(b)) => {
                let mut spec = json!({});
                for (field, wire) in fields(b)? {
                    match (field, wire) {
                        (1, Wire::Bytes(v)) => spec["minAvailable"] = int_or_string(v)?,
                        (2, Wire::Bytes(v)) => spec["selector"] = label_selector(v)?,
                        (3, Wire::Bytes(v)) => spec["maxUnavailable"] = int_or_string(v)?,
                        (4, Wire::Bytes(v)) => spec["unhealthyPodEvictionPolicy"] = json!(text(v)?),
                        _ => {}
                    }
                }
                obj["spec"] = spec;
            }
            _ => {}
        }
    }
    Ok(obj)
}

/// policy/v1 Eviction: metadata and deleteOptions.
fn eviction(bytes: &[u8]) -> Result<Value, Error> {
    let mut obj = json!({"apiVersion": "policy/v1", "kind": "Eviction"});
    for (field, wire) in fields(bytes)? {
        match (field, wire) {
            (1, Wire::Bytes(b)) => obj["metadata"] = object_meta(b)?,
            (2, Wire::Bytes(b)) => obj["deleteOptions"] = delete_options(b)?,
            _ => {}
        }
    }
    Ok(obj)
}

fn delete_options(bytes: &[u8]) -> Result<Value, Error> {
    let mut options = json!({});
    for (field, wire) in fields(bytes)? {
        match (field, wire) {
            // int64 in two's complement.
            (1, Wire::Varint(v)) => options["gracePeriodSeconds"] = json!(v as i64),
            (2, Wire::Bytes(b)) => {
                let mut pre = json!({});
                for (field, wire) in fields(b)? {
                    match (field, wire) {
                        (1, Wire::Bytes(u)) => pre["uid"] = json!(text(u)?),
                        (2, Wire::Bytes(r)) => pre["resourceVersion"] = json!(text(r)?),
                        _ => {}
                    }
                }
                options["preconditions"] = pre;
            }
            (3, Wire::Varint(v)) => options["orphanDependents"] = json!(v != 0),
            (4, Wire::Bytes(b)) => options["propagationPolicy"] = json!(text(b)?),
            (5, Wire::Bytes(b)) => push_string(&mut options, "dryRun", b)?,
            _ => {}
        }
    }
    Ok(options)
}

/// Decodes a body whose kind must be `expected` (ConfigMap, Namespace or Eviction).
pub(crate) fn decode(body: &[u8], expected: &str) -> Result<Value, Error> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| Error::Malformed("provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]".to_string()))?;
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (field, wire) in fields(envelope)? {
        match (field, wire) {
            (1, Wire::Bytes(type_meta)) => {
                for (field, wire) in fields(type_meta)? {
                    if let (2, Wire::Bytes(k)) = (field, wire) {
                        kind = text(k)?;
                    }
                }
            }
            (2, Wire::Bytes(bytes)) => raw = bytes,
            _ => {}
        }
    }
    match (kind.as_str(), expected) {
        ("ConfigMap", "ConfigMap") => configmap(raw),
        ("Namespace", "Namespace") => namespace(raw),
        ("Eviction", "Eviction") => eviction(raw),
        ("PodDisruptionBudget", "PodDisruptionBudget") => pod_disruption_budget(raw),
        _ => Err(Error::UnsupportedKind(kind)),
    }
}

/// Standard base64 with padding.
fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
