//! [`ApiServer`]'s helpers for CustomResourceDefinitions and their objects.

use serde_json::Value;

use crate::resource::{Resource, Target};
use crate::store::Opts;
use crate::ApiServer;

use super::serving::parse_target;

impl ApiServer {
    /// Creates a CustomResourceDefinition (with all of the server's checks; panics if
    /// refused) and returns it as stored once established (`acceptedNames`, `NamesAccepted`
    /// and `Established`); its resource is served from then on.
    pub fn create_crd(&self, crd: Value) -> Value {
        let target = Target::cluster(Resource::CustomResourceDefinitions);
        let created = self.helper(|state| state.create(&target, crd, &Opts::default()));
        let name = created["metadata"]["name"].as_str().unwrap_or("");
        self.crd(name).unwrap_or(created)
    }

    /// The stored CustomResourceDefinition `name` (`PLURAL.GROUP`), if any.
    pub fn crd(&self, name: &str) -> Option<Value> {
        self.lock().get_served(&Target::object(
            Resource::CustomResourceDefinitions,
            None,
            name,
        ))
    }

    /// Deletes a CustomResourceDefinition and, with it, every object of its resource.
    pub fn delete_crd(&self, name: &str) {
        let target = Target::object(Resource::CustomResourceDefinitions, None, name);
        self.helper(|state| state.delete(&target, None, &Opts::default()));
    }

    /// The stored object `name` of a custom resource (`api_version` `GROUP/VERSION`,
    /// `plural`; `namespace` `None` for a cluster-scoped one), as that version serves it.
    pub fn custom_object(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let mut path = format!("/apis/{api_version}/");
        if let Some(ns) = namespace {
            path.push_str(&format!("namespaces/{ns}/"));
        }
        path.push_str(&format!("{plural}/{name}"));
        let state = self.lock();
        let target = parse_target(&state, &path)?;
        state.get_served(&target)
    }
}
