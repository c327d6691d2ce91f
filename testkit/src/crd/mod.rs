//! CustomResourceDefinitions (apiextensions.k8s.io/v1) and the serving of their resources.
//!
//! A definition is validated as pkg/apis/apiextensions/validation does for v1 (name
//! `<plural>.<group>`, group, scope, names, versions with exactly one storage version, a
//! structural `openAPIV3Schema` for every version (module `schema`), conversion strategy,
//! immutable group and plural, immutable scope and kind once established, stored versions,
//! API approval of protected groups), defaulted (singular, listKind, conversion `None`) and
//! given `status.storedVersions`. The controllers' work is done at once, after the write:
//! the naming and establishing controllers set `acceptedNames` and the `NamesAccepted` and
//! `Established` conditions (a second write, as on a real server, so the create answer has
//! neither), and a delete marks the definition (deletionTimestamp, the
//! `customresourcecleanup.apiextensions.k8s.io` finalizer, `Terminating`), deletes every
//! object of the resource and removes it.
//!
//! While a definition is established, its resource is served at
//! `/apis/GROUP/VERSION/[namespaces/NS/]PLURAL[/NAME[/status]]` for every served version
//! (module `custom` has the objects' strategy) and listed by discovery. Deviations: names
//! conflicts between definitions are not detected, webhook conversion is accepted but not
//! performed (every version is served as stored, with its apiVersion), watches of a
//! resource end when its definition changes kind, scope, names or storage version or is
//! deleted, without the DELETED events of the cleanup.
//!
//! Layout: `types` (the served types, interned), `decode` (the fields the decoder knows),
//! `validation` (defaults and validation), `controller` (naming, establishing, cleanup),
//! `serving` (requests, paths, discovery) and `api` ([`ApiServer`]'s helpers).
//!
//! [`ApiServer`]: crate::ApiServer

mod api;
mod controller;
mod decode;
mod serving;
mod types;
mod validation;

pub(crate) use controller::{delete, on_commit};
pub(crate) use decode::{check_types, CRD};
pub(crate) use serving::{discovery, discovery_groups, parse_target, served, terminating_error};
pub(crate) use types::{custom_type, CustomType, GroupVersion};
pub(crate) use validation::{prepare, validate};

/// The finalizer a delete adds; removed once the objects are gone.
const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
/// The annotation protected groups (`*.k8s.io`, `*.kubernetes.io`) must carry.
const APPROVAL_ANNOTATION: &str = "api-approved.kubernetes.io";
