//! Fuzzes the KubeletConfiguration parser and validator
//! (`kp_kubelet_config`) with arbitrary bytes.
//!
//! Run, from the repository root (needs a nightly toolchain and
//! `cargo install cargo-fuzz`):
//!
//! ```text
//! cargo +nightly fuzz run config_parser                  # until stopped
//! cargo +nightly fuzz run config_parser -- -max_total_time=60 -max_len=65536
//! cargo +nightly fuzz build config_parser                # build only
//! ```
//!
//! Without nightly, check that it compiles:
//! `cargo check --manifest-path fuzz/Cargo.toml`.
//!
//! Besides "never panics", it checks that an accepted config's effective
//! file (what the kubelet reads) is itself accepted and hashes the same.

#![no_main]

use kp_kubelet_config::{KubeletConfig, MAX_CONFIG_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(config) = KubeletConfig::parse_and_validate(data) else {
        return;
    };
    let effective = config.effective_bytes();
    // Defaults and JSON quoting can push a config near the limit over it.
    if effective.len() > MAX_CONFIG_BYTES {
        return;
    }
    match KubeletConfig::parse_and_validate(&effective) {
        Ok(again) => assert_eq!(
            again.hash(),
            config.hash(),
            "effective config hashes differently"
        ),
        Err(err) => panic!("the effective config of an accepted config is refused: {err}"),
    }
});
