//! The integration tests, in one binary: the suite's test code and its fixtures ([`support`])
//! are compiled and linked once, not once per file. Each module is one former test file, run
//! as `cargo test --test it MODULE::` (or `MODULE::TEST`).
//!
//! The tests of every module run in one process, two at a time on two cores as libtest
//! schedules them. Nothing here changes the process's environment, working directory or
//! signal dispositions; the few tests that need the machine to themselves (they bring their
//! own load and bound latencies under it) hold [`support::alone`], and every node scene waits
//! for them (`support/alone.rs`).

mod support;

mod alerts;
mod api_outage;
mod api_sync;
mod apiserver;
mod architecture;
mod bad_day;
mod bad_input;
mod bootstrap;
mod chaos;
mod cli_manners;
mod config_dir;
mod config_lifecycle;
mod contention;
mod crash_consistency;
mod credentials;
mod debug_free_logs;
mod disruption;
mod drain_counts;
mod error_texts;
mod hostile_config;
mod hostile_node;
mod idle;
mod install;
mod kubectl_completion;
mod kubelet_version;
mod log_style;
mod manifests;
mod metrics;
mod namespaces;
mod node_lifecycle;
mod node_settings;
mod pipes;
mod pivot_protocol;
mod rollout;
mod rollout_cli;
mod rollout_e2e;
mod rollout_undo;
mod sd_notify;
mod sigterm;
mod skew;
mod stand_in_state;
mod systemd_unit;
mod timers;
mod yaml_decoding;
