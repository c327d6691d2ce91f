//! RBAC: the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings of manifest files,
//! evaluated as the RBAC authorizer of Kubernetes v1.32 does
//! (plugin/pkg/auth/authorizer/rbac/rbac.go, pkg/apis/rbac/v1/evaluation_helpers.go,
//! pkg/registry/rbac/validation/rule.go).
//!
//! A request is allowed when a binding whose subjects include the user grants a rule that
//! matches it:
//!
//! - a ClusterRoleBinding's ClusterRole applies everywhere (cluster-scoped requests and every
//!   namespace); a RoleBinding's Role (in the binding's namespace) or ClusterRole applies only
//!   to requests in the binding's namespace;
//! - subjects: `User` by name, `Group` by one of the user's groups, `ServiceAccount` as the
//!   user `system:serviceaccount:NS:NAME` (NS defaults to a RoleBinding's namespace);
//! - a rule matches when the verb is in `verbs`, the API group in `apiGroups` (`""` is core),
//!   the resource (`pods`, or `pods/eviction` for a subresource) in `resources`, each list
//!   may hold `*`, and `*/SUB` matches subresource SUB of any resource; non-empty
//!   `resourceNames` limit the rule to those object names (a list, watch or create without a
//!   name never matches them). `nonResourceURLs` rules are kept but never match a resource
//!   request.
//!
//! Documents are read as `kubectl apply -f` would send them: every document of a
//! multi-document YAML file, kinds other than the four RBAC ones ignored, a namespaced kind
//! without `metadata.namespace` in `default`, a subject's `apiGroup` defaulted
//! (`rbac.authorization.k8s.io` for User and Group, `""` for ServiceAccount). What the API
//! server's validation would refuse is an error here: a binding without `roleRef`, a
//! ClusterRoleBinding referring to a Role, an unknown subject kind, a rule without verbs, a
//! resource rule without `apiGroups` or `resources`, `nonResourceURLs` in a Role. Not
//! modelled (an error rather than a silent difference): ClusterRole `aggregationRule`. A
//! binding whose role does not exist grants nothing, as on a real server.
//!
//! [`Policy::shipped`] is the policy of the repository's top-level `manifests/*.yaml` (what
//! `kubectl apply -f manifests/` creates; kubectl does not recurse into `manifests/optional/`
//! without `-R`). The test API server authorizes node credentials with it, on top of its Node
//! authorizer (module `nodeauth`); [`crate::ApiServer::apply_rbac_manifest`] adds another file
//! (such as the opt-in `manifests/optional/node-rbac-without-node-authorizer.yaml`) and
//! [`crate::ApiServer::set_rbac`] replaces the policy.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::Value;

/// The API group of the RBAC kinds and of User and Group subjects.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// The namespace of a namespaced object without one (`kubectl apply` with the default context).
const DEFAULT_NAMESPACE: &str = "default";

/// The directory of the repository's manifests (`<repo>/manifests`).
pub fn manifests_dir() -> PathBuf {
    let testkit = Path::new(env!("CARGO_MANIFEST_DIR"));
    testkit.parent().unwrap_or(testkit).join("manifests")
}

/// The top-level manifest files (`manifests/*.yaml` and `*.yml`, sorted): what
/// `kubectl apply -f manifests/` applies. Subdirectories (`manifests/optional/`) are not
/// included.
pub fn shipped_manifests() -> Result<Vec<PathBuf>, String> {
    let dir = manifests_dir();
    let entries =
        std::fs::read_dir(&dir).map_err(|err| format!("cannot list {}: {err}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|err| format!("cannot list {}: {err}", dir.display()))?
            .path();
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if yaml && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Who makes a request: the user name and groups an authenticator gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    pub fn new(name: &str, groups: &[&str]) -> User {
        User {
            name: name.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    /// A kubelet's credentials: `system:node:NODE` in `system:nodes` and
    /// `system:authenticated`.
    pub fn node(node: &str) -> User {
        User::new(
            &format!("system:node:{node}"),
            &["system:nodes", "system:authenticated"],
        )
    }

    /// A service account's token: `system:serviceaccount:NS:NAME` in
    /// `system:serviceaccounts`, `system:serviceaccounts:NS` and `system:authenticated`.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User::new(
            &format!("system:serviceaccount:{namespace}:{name}"),
            &[
                "system:serviceaccounts",
                &format!("system:serviceaccounts:{namespace}"),
                "system:authenticated",
            ],
        )
    }
}

/// The attributes of a resource request that RBAC looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub verb: String,
    /// `""` for the core group.
    pub api_group: String,
    /// The plural, e.g. `pods`.
    pub resource: String,
    /// e.g. `eviction`; `""` for none.
    pub subresource: String,
    /// `""` for a cluster-scoped request (or a namespaced resource across all namespaces).
    pub namespace: String,
    /// `""` for a list, watch or create (unless a `metadata.name` field selector names one).
    pub name: String,
}

impl Request {
    /// `verb` on `resource` (`pods`, or `pods/eviction` for a subresource) in the core group,
    /// cluster-wide and unnamed; see [`Request::group`], [`Request::namespace`] and
    /// [`Request::name`].
    pub fn new(verb: &str, resource: &str) -> Request {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Request {
            verb: verb.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            ..Request::default()
        }
    }

    pub fn group(mut self, api_group: &str) -> Request {
        self.api_group = api_group.to_string();
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Request {
        self.namespace = namespace.to_string();
        self
    }

    pub fn name(mut self, name: &str) -> Request {
        self.name = name.to_string();
        self
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        if !self.api_group.is_empty() {
            write!(f, ".{}", self.api_group)?;
        }
        if !self.name.is_empty() {
            write!(f, " {:?}", self.name)?;
        }
        if self.namespace.is_empty() {
            write!(f, " at the cluster scope")
        } else {
            write!(f, " in {}", self.namespace)
        }
    }
}

/// One PolicyRule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    #[serde(rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

impl Rule {
    /// rbacv1helpers: VerbMatches, APIGroupMatches, ResourceMatches, ResourceNameMatches.
    pub fn matches(&self, request: &Request) -> bool {
        let listed = |list: &[String], item: &str| list.iter().any(|v| v == "*" || v == item);
        listed(&self.verbs, &request.verb)
            && listed(&self.api_groups, &request.api_group)
            && self.resource_matches(request)
            && (self.resource_names.is_empty() || self.resource_names.contains(&request.name))
    }

    fn resource_matches(&self, request: &Request) -> bool {
        let combined = if request.subresource.is_empty() {
            request.resource.clone()
        } else {
            format!("{}/{}", request.resource, request.subresource)
        };
        self.resources.iter().any(|resource| {
            resource == "*"
                || *resource == combined
                || (!request.subresource.is_empty()
                    && resource.strip_prefix("*/") == Some(request.subresource.as_str()))
        })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "apiGroups {:?} resources {:?} verbs {:?}",
            self.api_groups, self.resources, self.verbs
        )?;
        if !self.resource_names.is_empty() {
            write!(f, " resourceNames {:?}", self.resource_names)?;
        }
        if !self.non_resource_urls.is_empty() {
            write!(f, " nonResourceURLs {:?}", self.non_resource_urls)?;
        }
        Ok(())
    }
}

/// A rule a user holds, and where: `namespace` `None` for every namespace and the cluster
/// scope (a ClusterRoleBinding), else the namespace of the RoleBinding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub namespace: Option<String>,
    pub rule: Rule,
    /// e.g. `RoleBinding kubelet-config/kubelet-config-reader-nodes -> Role kubelet-config-reader`.
    pub via: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RoleKind {
    Role,
    ClusterRole,
}

impl RoleKind {
    fn as_str(self) -> &'static str {
        match self {
            RoleKind::Role => "Role",
            RoleKind::ClusterRole => "ClusterRole",
        }
    }
}

#[derive(Clone, Debug)]
struct Role {
    kind: RoleKind,
    /// `""` for a ClusterRole.
    namespace: String,
    name: String,
    rules: Vec<Rule>,
}

#[derive(Clone, Debug)]
enum Subject {
    User(String),
    Group(String),
    /// The user name `system:serviceaccount:NS:NAME`.
    ServiceAccount(String),
}

#[derive(Clone, Debug)]
struct Binding {
    /// `None` for a ClusterRoleBinding.
    namespace: Option<String>,
    name: String,
    role_kind: RoleKind,
    role_name: String,
    subjects: Vec<Subject>,
}

/// The RBAC objects of some manifests. Later documents replace earlier ones of the same kind,
/// namespace and name, as `kubectl apply` does.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    roles: Vec<Role>,
    bindings: Vec<Binding>,
    sources: Vec<PathBuf>,
}

impl Policy {
    /// No roles, no bindings: RBAC allows nothing.
    pub fn empty() -> Policy {
        Policy::default()
    }

    /// The policy of the repository's top-level manifests ([`shipped_manifests`]), read once
    /// per process.
    pub fn shipped() -> Result<Arc<Policy>, String> {
        static SHIPPED: OnceLock<Result<Arc<Policy>, String>> = OnceLock::new();
        SHIPPED
            .get_or_init(|| {
                let files = shipped_manifests()?;
                Policy::from_files(&files).map(Arc::new)
            })
            .clone()
    }

    /// The RBAC documents of these files, applied in order.
    pub fn from_files<P: AsRef<Path>>(files: &[P]) -> Result<Policy, String> {
        let mut policy = Policy::empty();
        for file in files {
            policy.apply_file(file.as_ref())?;
        }
        Ok(policy)
    }

    /// The RBAC documents of a YAML stream (one or more documents).
    pub fn from_yaml(yaml: &str) -> Result<Policy, String> {
        let mut policy = Policy::empty();
        policy.apply_yaml(yaml, "YAML")?;
        Ok(policy)
    }

    /// Adds (or replaces, by kind, namespace and name) the RBAC documents of `file`.
    pub fn apply_file(&mut self, file: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(file)
            .map_err(|err| format!("cannot read {}: {err}", file.display()))?;
        self.apply_yaml(&text, &file.display().to_string())?;
        self.sources.push(file.to_path_buf());
        Ok(())
    }

    /// Adds (or replaces) the RBAC documents of a YAML stream; `source` names it in errors.
    pub fn apply_yaml(&mut self, yaml: &str, source: &str) -> Result<(), String> {
        for (index, document) in serde_yaml_ng::Deserializer::from_str(yaml).enumerate() {
            let doc = Value::deserialize(document)
                .map_err(|err| format!("{source}: document {}: {err}", index + 1))?;
            self.apply_document(&doc)
                .map_err(|err| format!("{source}: document {}: {err}", index + 1))?;
        }
        Ok(())
    }

    /// The files applied so far (by [`Policy::apply_file`] and the constructors that read
    /// files).
    pub fn sources(&self) -> &[PathBuf] {
        &self.sources
    }

    /// Whether RBAC allows `user` the request.
    pub fn allows(&self, user: &User, request: &Request) -> bool {
        self.grants(user).iter().any(|grant| {
            grant
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == request.namespace)
                && grant.rule.matches(request)
        })
    }

    /// Every rule `user` holds, with where it applies and through which binding.
    pub fn grants(&self, user: &User) -> Vec<Grant> {
        let mut grants = Vec::new();
        for binding in &self.bindings {
            let namespace = binding.namespace.as_deref().unwrap_or("");
            if !binding.subjects.iter().any(|s| s.includes(user)) {
                continue;
            }
            let role_namespace = match binding.role_kind {
                RoleKind::Role => namespace,
                RoleKind::ClusterRole => "",
            };
            let Some(role) = self.roles.iter().find(|r| {
                r.kind == binding.role_kind
                    && r.name == binding.role_name
                    && r.namespace == role_namespace
            }) else {
                continue;
            };
            let via = match &binding.namespace {
                Some(ns) => format!(
                    "RoleBinding {ns}/{} -> {} {}",
                    binding.name,
                    role.kind.as_str(),
                    role.name
                ),
                None => format!(
                    "ClusterRoleBinding {} -> ClusterRole {}",
                    binding.name, role.name
                ),
            };
            for rule in &role.rules {
                grants.push(Grant {
                    namespace: binding.namespace.clone(),
                    rule: rule.clone(),
                    via: via.clone(),
                });
            }
        }
        grants
    }

    fn apply_document(&mut self, doc: &Value) -> Result<(), String> {
        let kind = doc["kind"].as_str().unwrap_or("");
        if !matches!(
            kind,
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding"
        ) {
            return Ok(());
        }
        let api_version = doc["apiVersion"].as_str().unwrap_or("");
        if api_version != format!("{RBAC_GROUP}/v1") {
            return Err(format!(
                "{kind} has apiVersion {api_version:?}, not {RBAC_GROUP}/v1"
            ));
        }
        let name = doc["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("{kind} without metadata.name"))?
            .to_string();
        let namespaced = matches!(kind, "Role" | "RoleBinding");
        let namespace = if namespaced {
            doc["metadata"]["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(DEFAULT_NAMESPACE)
                .to_string()
        } else {
            String::new()
        };
        let what = if namespaced {
            format!("{kind} {namespace}/{name}")
        } else {
            format!("{kind} {name}")
        };
        match kind {
            "Role" | "ClusterRole" => {
                let role = parse_role(doc, kind, namespace, name)
                    .map_err(|err| format!("{what}: {err}"))?;
                self.roles.retain(|r| {
                    !(r.kind == role.kind && r.namespace == role.namespace && r.name == role.name)
                });
                self.roles.push(role);
            }
            _ => {
                let binding = parse_binding(doc, namespaced.then_some(namespace), name)
                    .map_err(|err| format!("{what}: {err}"))?;
                self.bindings
                    .retain(|b| !(b.namespace == binding.namespace && b.name == binding.name));
                self.bindings.push(binding);
            }
        }
        Ok(())
    }
}

fn parse_role(doc: &Value, kind: &str, namespace: String, name: String) -> Result<Role, String> {
    if doc.get("aggregationRule").is_some_and(|a| !a.is_null()) {
        return Err("aggregationRule is not modelled by the test API server".to_string());
    }
    let rules: Vec<Rule> = match doc.get("rules") {
        None | Some(Value::Null) => Vec::new(),
        Some(rules) => {
            serde_json::from_value(rules.clone()).map_err(|err| format!("rules: {err}"))?
        }
    };
    for (i, rule) in rules.iter().enumerate() {
        if rule.verbs.is_empty() {
            return Err(format!(
                "rules[{i}].verbs: Required value: verbs must contain at least one value"
            ));
        }
        if !rule.non_resource_urls.is_empty() {
            if kind == "Role" {
                return Err(format!(
                    "rules[{i}].nonResourceURLs: Invalid value: namespaced rules cannot apply to non-resource URLs"
                ));
            }
            if !rule.api_groups.is_empty() || !rule.resources.is_empty() {
                return Err(format!(
                    "rules[{i}].nonResourceURLs: Invalid value: rules cannot apply to both regular resources and non-resource URLs"
                ));
            }
        } else if rule.api_groups.is_empty() {
            return Err(format!(
                "rules[{i}].apiGroups: Required value: resource rules must supply at least one api group"
            ));
        } else if rule.resources.is_empty() {
            return Err(format!(
                "rules[{i}].resources: Required value: resource rules must supply at least one resource"
            ));
        }
    }
    Ok(Role {
        kind: if kind == "Role" {
            RoleKind::Role
        } else {
            RoleKind::ClusterRole
        },
        namespace,
        name,
        rules,
    })
}

fn parse_binding(doc: &Value, namespace: Option<String>, name: String) -> Result<Binding, String> {
    let role_ref = &doc["roleRef"];
    if role_ref.is_null() {
        return Err("roleRef: Required value".to_string());
    }
    if role_ref["apiGroup"].as_str() != Some(RBAC_GROUP) {
        return Err(format!(
            "roleRef.apiGroup: Unsupported value: {}: supported values: \"{RBAC_GROUP}\"",
            role_ref["apiGroup"]
        ));
    }
    let role_kind = match (role_ref["kind"].as_str(), &namespace) {
        (Some("ClusterRole"), _) => RoleKind::ClusterRole,
        (Some("Role"), Some(_)) => RoleKind::Role,
        (Some("Role"), None) => {
            return Err(
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""
                    .to_string(),
            )
        }
        (other, _) => {
            return Err(format!(
                "roleRef.kind: Unsupported value: {other:?}: supported values: \"Role\", \"ClusterRole\""
            ))
        }
    };
    let role_name = role_ref["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or("roleRef.name: Required value")?
        .to_string();
    let mut subjects = Vec::new();
    for (i, subject) in doc["subjects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        subjects.push(
            parse_subject(subject, namespace.as_deref())
                .map_err(|err| format!("subjects[{i}]{err}"))?,
        );
    }
    Ok(Binding {
        namespace,
        name,
        role_kind,
        role_name,
        subjects,
    })
}

/// One subject, its apiGroup defaulted and checked as validation does.
fn parse_subject(subject: &Value, binding_namespace: Option<&str>) -> Result<Subject, String> {
    let kind = subject["kind"].as_str().unwrap_or("");
    let name = subject["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or(".name: Required value")?;
    let api_group = subject["apiGroup"].as_str().unwrap_or("");
    match kind {
        "User" | "Group" => {
            if !api_group.is_empty() && api_group != RBAC_GROUP {
                return Err(format!(
                    ".apiGroup: Unsupported value: {api_group:?}: supported values: \"{RBAC_GROUP}\""
                ));
            }
            Ok(if kind == "User" {
                Subject::User(name.to_string())
            } else {
                Subject::Group(name.to_string())
            })
        }
        "ServiceAccount" => {
            if !api_group.is_empty() {
                return Err(format!(
                    ".apiGroup: Unsupported value: {api_group:?}: supported values: \"\""
                ));
            }
            let namespace = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .or(binding_namespace)
                .ok_or(".namespace: Required value")?;
            Ok(Subject::ServiceAccount(format!(
                "system:serviceaccount:{namespace}:{name}"
            )))
        }
        other => Err(format!(
            ".kind: Unsupported value: {other:?}: supported values: \"ServiceAccount\", \"User\", \"Group\""
        )),
    }
}

impl Subject {
    /// rbac.go appliesToUser.
    fn includes(&self, user: &User) -> bool {
        match self {
            Subject::User(name) | Subject::ServiceAccount(name) => *name == user.name,
            Subject::Group(group) => user.groups.contains(group),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLES: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules:
  - apiGroups: [""]
    resources: ["pods", "*/status"]
    verbs: ["get", "list"]
  - apiGroups: ["apps", "*"]
    resources: ["deployments"]
    verbs: ["*"]
    resourceNames: ["web"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cm, namespace: ns1}
rules:
  - apiGroups: [""]
    resources: ["configmaps", "pods/eviction"]
    verbs: ["create"]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
"#;

    fn policy(bindings: &str) -> Policy {
        Policy::from_yaml(&format!("{ROLES}---\n{bindings}")).expect("a valid policy")
    }

    #[test]
    fn a_cluster_role_binding_applies_everywhere_a_role_binding_in_its_namespace() {
        let p = policy(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: all}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: Group, name: readers}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: local, namespace: ns2}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: cm, namespace: ns1}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm}
subjects: [{kind: ServiceAccount, name: bot}]
"#,
        );
        let reader = User::new("bob", &["readers"]);
        let alice = User::new("alice", &[]);
        let bot = User::service_account("ns1", "bot");
        let list_pods = Request::new("list", "pods");
        assert!(p.allows(&reader, &list_pods));
        assert!(p.allows(&reader, &list_pods.clone().namespace("ns9")));
        assert!(!p.allows(&alice, &list_pods));
        assert!(p.allows(&alice, &list_pods.clone().namespace("ns2")));
        assert!(!p.allows(&alice, &list_pods.clone().namespace("ns1")));
        // The ServiceAccount subject's namespace defaults to the RoleBinding's.
        assert!(p.allows(&bot, &Request::new("create", "configmaps").namespace("ns1")));
        assert!(!p.allows(&bot, &Request::new("create", "configmaps").namespace("ns2")));
        assert!(!p.allows(
            &User::service_account("ns2", "bot"),
            &Request::new("create", "configmaps").namespace("ns1")
        ));
        assert!(!p.allows(&bot, &Request::new("get", "configmaps").namespace("ns1")));
        assert_eq!(p.grants(&bot).len(), 1);
        assert_eq!(
            p.grants(&bot)[0].via,
            "RoleBinding ns1/cm -> Role cm",
            "{:?}",
            p.grants(&bot)
        );
    }

    #[test]
    fn subresources_wildcards_and_resource_names_match_as_rbac_does() {
        let p = policy(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: all}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: Group, name: system:authenticated}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: cm, namespace: ns1}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm}
subjects: [{kind: Group, name: system:nodes}]
"#,
        );
        let node = User::node("n1");
        // `*/status` is any resource's status subresource, not the resource itself.
        assert!(p.allows(&node, &Request::new("get", "nodes/status")));
        assert!(!p.allows(&node, &Request::new("get", "nodes")));
        assert!(!p.allows(&node, &Request::new("get", "pods/log")));
        // `pods` does not cover its subresources; `pods/eviction` is its own resource.
        assert!(!p.allows(&node, &Request::new("get", "pods/eviction")));
        assert!(p.allows(
            &node,
            &Request::new("create", "pods/eviction").namespace("ns1")
        ));
        assert!(!p.allows(&node, &Request::new("create", "pods").namespace("ns1")));
        // Verb and group wildcards, limited by resourceNames (a list has no name).
        let deployment = Request::new("delete", "deployments").group("apps");
        assert!(p.allows(&node, &deployment.clone().name("web")));
        assert!(p.allows(&node, &deployment.clone().group("example.com").name("web")));
        assert!(!p.allows(&node, &deployment.clone().name("db")));
        assert!(!p.allows(&node, &Request::new("list", "deployments").group("apps")));
        // Core is "", not any group.
        assert!(!p.allows(&node, &Request::new("get", "pods").group("example.com")));
    }

    #[test]
    fn later_documents_replace_earlier_ones_and_missing_roles_grant_nothing() {
        let mut p = policy(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: all}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: nowhere}
subjects: [{kind: Group, name: g}]
"#,
        );
        let user = User::new("u", &["g"]);
        assert!(p.grants(&user).is_empty());
        p.apply_yaml(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: all}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: Group, name: g}]
"#,
            "second",
        )
        .expect("valid");
        assert!(p.allows(&user, &Request::new("get", "pods")));
    }

    #[test]
    fn what_validation_refuses_is_an_error() {
        let cases = [
            (
                "kind: ClusterRoleBinding\nmetadata: {name: b}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}",
                "ClusterRoleBinding b: roleRef.kind: Unsupported value: \"Role\"",
            ),
            (
                "kind: RoleBinding\nmetadata: {name: b}\nsubjects: []",
                "RoleBinding default/b: roleRef: Required value",
            ),
            (
                "kind: ClusterRoleBinding\nmetadata: {name: b}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: r}\nsubjects: [{kind: ServiceAccount, name: sa}]",
                "subjects[0].namespace: Required value",
            ),
            (
                "kind: ClusterRoleBinding\nmetadata: {name: b}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: r}\nsubjects: [{kind: Robot, name: r2}]",
                "subjects[0].kind: Unsupported value: \"Robot\"",
            ),
            (
                "kind: Role\nmetadata: {name: r, namespace: x}\nrules: [{apiGroups: [\"\"], resources: [pods]}]",
                "Role x/r: rules[0].verbs: Required value",
            ),
            (
                "kind: Role\nmetadata: {name: r, namespace: x}\nrules: [{verbs: [get], nonResourceURLs: [/healthz]}]",
                "namespaced rules cannot apply to non-resource URLs",
            ),
            (
                "kind: ClusterRole\nmetadata: {name: r}\nrules: [{verbs: [get], resources: [pods]}]",
                "rules[0].apiGroups: Required value",
            ),
            (
                "kind: ClusterRole\nmetadata: {name: r}\naggregationRule: {clusterRoleSelectors: []}",
                "aggregationRule is not modelled",
            ),
        ];
        for (yaml, expected) in cases {
            let yaml = format!("apiVersion: rbac.authorization.k8s.io/v1\n{yaml}");
            let err = Policy::from_yaml(&yaml).expect_err(expected);
            assert!(err.contains(expected), "{err}\nexpected: {expected}");
        }
        let err = Policy::from_yaml("apiVersion: rbac.authorization.k8s.io/v1beta1\nkind: Role\n")
            .expect_err("old apiVersion");
        assert!(err.contains("not rbac.authorization.k8s.io/v1"), "{err}");
    }

    #[test]
    fn the_shipped_manifests_load() {
        let files = shipped_manifests().expect("list manifests/");
        assert!(
            files.iter().any(|f| f.ends_with("10-rbac.yaml")),
            "{files:?}"
        );
        assert!(
            files
                .iter()
                .all(|f| f.parent() == Some(manifests_dir().as_path())),
            "only top-level files: {files:?}"
        );
        let policy = Policy::shipped().expect("the shipped RBAC parses");
        assert_eq!(policy.sources(), files.as_slice());
    }
}
