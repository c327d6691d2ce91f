//! Resources, API groups and request targets: what a path like
//! `/apis/policy/v1/namespaces/NS/poddisruptionbudgets/NAME/status` names.

use crate::crd;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Resource {
    Nodes,
    ConfigMaps,
    Events,
    Namespaces,
    Pods,
    PodDisruptionBudgets,
    Leases,
    CustomResourceDefinitions,
    /// The objects of a CustomResourceDefinition (module `crd`).
    Custom(&'static crd::CustomType),
}

/// Every built-in resource.
pub(crate) const RESOURCES: [Resource; 8] = [
    Resource::Nodes,
    Resource::ConfigMaps,
    Resource::Events,
    Resource::Namespaces,
    Resource::Pods,
    Resource::PodDisruptionBudgets,
    Resource::Leases,
    Resource::CustomResourceDefinitions,
];

impl Resource {
    pub(crate) fn plural(self) -> &'static str {
        match self {
            Resource::Nodes => "nodes",
            Resource::ConfigMaps => "configmaps",
            Resource::Events => "events",
            Resource::Namespaces => "namespaces",
            Resource::Pods => "pods",
            Resource::PodDisruptionBudgets => "poddisruptionbudgets",
            Resource::Leases => "leases",
            Resource::CustomResourceDefinitions => "customresourcedefinitions",
            Resource::Custom(custom) => custom.plural,
        }
    }

    pub(crate) fn kind(self) -> &'static str {
        match self {
            Resource::Nodes => "Node",
            Resource::ConfigMaps => "ConfigMap",
            Resource::Events => "Event",
            Resource::Namespaces => "Namespace",
            Resource::Pods => "Pod",
            Resource::PodDisruptionBudgets => "PodDisruptionBudget",
            Resource::Leases => "Lease",
            Resource::CustomResourceDefinitions => "CustomResourceDefinition",
            Resource::Custom(custom) => custom.kind,
        }
    }

    /// The kind of a list (`NodeList`; a CustomResourceDefinition's `spec.names.listKind`).
    pub(crate) fn list_kind(self) -> String {
        match self {
            Resource::Custom(custom) => custom.list_kind.to_string(),
            other => format!("{}List", other.kind()),
        }
    }

    pub(crate) fn namespaced(self) -> bool {
        match self {
            Resource::ConfigMaps
            | Resource::Events
            | Resource::Pods
            | Resource::PodDisruptionBudgets
            | Resource::Leases => true,
            Resource::Nodes | Resource::Namespaces | Resource::CustomResourceDefinitions => false,
            Resource::Custom(custom) => custom.namespaced,
        }
    }

    pub(crate) fn short_names(self) -> &'static [&'static str] {
        match self {
            Resource::Nodes => &["no"],
            Resource::ConfigMaps => &["cm"],
            Resource::Events => &["ev"],
            Resource::Namespaces => &["ns"],
            Resource::Pods => &["po"],
            Resource::PodDisruptionBudgets => &["pdb"],
            Resource::CustomResourceDefinitions => &["crd", "crds"],
            // A custom resource's come from its definition (module `crd`).
            Resource::Leases | Resource::Custom(_) => &[],
        }
    }

    /// The subresources served below an object (`nodes/NAME/status`, ...); a custom
    /// resource's `status` only when its definition enables it (checked by `crd`).
    fn subresources(self) -> &'static [&'static str] {
        match self {
            Resource::Nodes
            | Resource::PodDisruptionBudgets
            | Resource::CustomResourceDefinitions
            | Resource::Custom(_) => &["status"],
            Resource::Pods => &["status", "eviction"],
            Resource::ConfigMaps | Resource::Events | Resource::Namespaces | Resource::Leases => {
                &[]
            }
        }
    }

    /// The group whose version the object is stored in (Events: core/v1; a custom resource:
    /// its storage version).
    pub(crate) fn home_group(self) -> ApiGroup {
        match self {
            Resource::PodDisruptionBudgets => ApiGroup::PolicyV1,
            Resource::Leases => ApiGroup::CoordinationV1,
            Resource::CustomResourceDefinitions => ApiGroup::ApiextensionsV1,
            Resource::Custom(custom) => ApiGroup::Custom(custom.storage),
            _ => ApiGroup::Core,
        }
    }

    pub(crate) fn is_custom(self) -> bool {
        matches!(self, Resource::Custom(_))
    }

    fn from_plural(plural: &str) -> Option<Resource> {
        RESOURCES
            .into_iter()
            .find(|resource| resource.plural() == plural)
    }
}

/// The API group a request came through; Events are served by both core and events.k8s.io.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ApiGroup {
    Core,
    EventsV1,
    PolicyV1,
    CoordinationV1,
    ApiextensionsV1,
    /// A version of a CustomResourceDefinition's group.
    Custom(&'static crd::GroupVersion),
}

impl ApiGroup {
    pub(crate) fn group(self) -> &'static str {
        match self {
            ApiGroup::Core => "",
            ApiGroup::EventsV1 => "events.k8s.io",
            ApiGroup::PolicyV1 => "policy",
            ApiGroup::CoordinationV1 => "coordination.k8s.io",
            ApiGroup::ApiextensionsV1 => "apiextensions.k8s.io",
            ApiGroup::Custom(gv) => gv.group,
        }
    }

    pub(crate) fn api_version(self) -> &'static str {
        match self {
            ApiGroup::Core => "v1",
            ApiGroup::EventsV1 => "events.k8s.io/v1",
            ApiGroup::PolicyV1 => "policy/v1",
            ApiGroup::CoordinationV1 => "coordination.k8s.io/v1",
            ApiGroup::ApiextensionsV1 => "apiextensions.k8s.io/v1",
            ApiGroup::Custom(gv) => gv.api_version,
        }
    }

    /// Whether `resource` is served through this group.
    fn serves(self, resource: Resource) -> bool {
        match self {
            ApiGroup::Core => matches!(
                resource,
                Resource::Nodes
                    | Resource::ConfigMaps
                    | Resource::Events
                    | Resource::Namespaces
                    | Resource::Pods
            ),
            ApiGroup::EventsV1 => resource == Resource::Events,
            ApiGroup::PolicyV1 => resource == Resource::PodDisruptionBudgets,
            ApiGroup::CoordinationV1 => resource == Resource::Leases,
            ApiGroup::ApiextensionsV1 => resource == Resource::CustomResourceDefinitions,
            ApiGroup::Custom(gv) => {
                matches!(resource, Resource::Custom(custom) if custom.group == gv.group)
            }
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) group: ApiGroup,
    pub(crate) resource: Resource,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
}

impl Target {
    pub(crate) fn cluster(resource: Resource) -> Target {
        Target::collection(resource, None)
    }

    pub(crate) fn collection(resource: Resource, namespace: Option<&str>) -> Target {
        Target {
            group: resource.home_group(),
            resource,
            namespace: namespace.map(str::to_string),
            name: None,
            subresource: None,
        }
    }

    pub(crate) fn object(resource: Resource, namespace: Option<&str>, name: &str) -> Target {
        Target {
            name: Some(name.to_string()),
            ..Target::collection(resource, namespace)
        }
    }

    /// `configmaps`, or `events.events.k8s.io` (the GroupResource string of messages).
    pub(crate) fn qualified(&self) -> String {
        match self.group {
            ApiGroup::Core => self.resource.plural().to_string(),
            group => format!("{}.{}", self.resource.plural(), group.group()),
        }
    }

    /// `nodes/status` or `configmaps` (what RBAC and `deny` match).
    pub(crate) fn rbac_resource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource.plural()),
            None => self.resource.plural().to_string(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    pub(crate) fn key(&self) -> (String, String) {
        (
            self.namespace.clone().unwrap_or_default(),
            self.name().to_string(),
        )
    }

    pub(crate) fn is_status(&self) -> bool {
        self.subresource.as_deref() == Some("status")
    }

    pub(crate) fn is_eviction(&self) -> bool {
        self.subresource.as_deref() == Some("eviction")
    }
}

/// Parses the resource paths of the built-in groups (`/api/v1/...`,
/// `/apis/events.k8s.io/v1/...`, `/apis/policy/v1/...`, `/apis/coordination.k8s.io/v1/...`,
/// `/apis/apiextensions.k8s.io/v1/...`); custom resources are `crd::parse_target`'s.
pub(crate) fn parse_target(path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => (ApiGroup::Core, rest),
        ["apis", "events.k8s.io", "v1", rest @ ..] => (ApiGroup::EventsV1, rest),
        ["apis", "policy", "v1", rest @ ..] => (ApiGroup::PolicyV1, rest),
        ["apis", "coordination.k8s.io", "v1", rest @ ..] => (ApiGroup::CoordinationV1, rest),
        ["apis", "apiextensions.k8s.io", "v1", rest @ ..] => (ApiGroup::ApiextensionsV1, rest),
        _ => return None,
    };
    let (namespace, resource, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] if Resource::from_plural(plural).is_some() => {
            let resource = Resource::from_plural(plural)?;
            if !resource.namespaced() {
                return None;
            }
            (Some(ns.to_string()), resource, tail)
        }
        [plural, tail @ ..] => (None, Resource::from_plural(plural)?, tail),
        [] => return None,
    };
    if !group.serves(resource) {
        return None;
    }
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, sub] if resource.subresources().contains(sub) => {
            (Some(name.to_string()), Some(sub.to_string()))
        }
        _ => return None,
    };
    // A namespaced resource has no objects outside a namespace (but lists across them).
    if resource.namespaced() && namespace.is_none() && name.is_some() {
        return None;
    }
    Some(Target {
        group,
        resource,
        namespace,
        name,
        subresource,
    })
}
