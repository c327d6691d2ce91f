//! Files kubelet-pivot can trust: the one atomic write and the one checked,
//! capped, non-blocking read ([`fsutil`]), and verified private directories
//! ([`trust`]).
//!
//! Calls nothing of ours; everything else may call it.

pub mod fsutil;
pub mod trust;
