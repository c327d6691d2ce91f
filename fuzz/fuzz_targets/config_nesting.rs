//! Fuzzes the nesting pre-scan (`KubeletConfig::check_bounds`) together with
//! the decoder: whatever the pre-scan lets through, the parser must not nest
//! deeper than `MAX_NESTING_DEPTH`, and the pre-scan must agree with `parse`
//! (a document it refuses is refused by `parse` with the same error).
//!
//! Run, from the repository root (needs a nightly toolchain and
//! `cargo install cargo-fuzz`):
//!
//! ```text
//! cargo +nightly fuzz run config_nesting -- -max_len=4096 -dict=fuzz/nesting.dict
//! ```
//!
//! Inputs are prefixed with the KubeletConfiguration header half the time
//! (first input byte odd), so the fuzzer reaches the schema checks too.

#![no_main]

use kp_kubelet_config::{ConfigError, KubeletConfig, MAX_NESTING_DEPTH};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const HEADER: &[u8] = b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let doc = if mode % 2 == 1 {
        [HEADER, body].concat()
    } else {
        body.to_vec()
    };
    let bounds = KubeletConfig::check_bounds(&doc);
    let parsed = KubeletConfig::parse(&doc);
    match (&bounds, &parsed) {
        (Err(ConfigError::TooDeep { .. }), Err(ConfigError::TooDeep { .. })) => {}
        (Err(ConfigError::TooLarge { .. }), Err(ConfigError::TooLarge { .. })) => {}
        (Err(b), p) => panic!("pre-scan refused ({b}) but parse gave {p:?}"),
        (Ok(()), Err(ConfigError::TooDeep { .. } | ConfigError::TooLarge { .. })) => {
            panic!("pre-scan accepted but parse refused it as out of bounds")
        }
        // An alias may stand for a nested node deep inside another one: the
        // text is what the scanner pays for, so only alias-free documents are
        // measured.
        (Ok(()), Ok(config)) if !doc.contains(&b'*') => {
            let d = depth(&Value::Object(config.document().clone()));
            assert!(
                d <= MAX_NESTING_DEPTH,
                "accepted a document nested {d} deep"
            );
        }
        (Ok(()), _) => {}
    }
});
