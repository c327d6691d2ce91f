//! Errors as the real server answers them: `Status` objects with the real codes, reasons,
//! messages, details and field causes.

use serde_json::{json, Value};

use crate::resource::{ApiGroup, Resource, Target};

#[derive(Clone, Debug)]
pub(crate) struct ApiError {
    pub(crate) code: u16,
    reason: &'static str,
    message: String,
    details: Option<Value>,
    pub(crate) retry_after: Option<u32>,
    /// `metadata.continue` of the Status (the token of an inconsistent continuation).
    continue_token: Option<String>,
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
            continue_token: None,
        }
    }

    pub(crate) fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// The Status carries `token` as its `metadata.continue`.
    pub(crate) fn with_continue(mut self, token: String) -> ApiError {
        self.continue_token = Some(token);
        self
    }

    pub(crate) fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        if !self.reason.is_empty() {
            status["reason"] = json!(self.reason);
        }
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        if let Some(token) = &self.continue_token {
            status["metadata"]["continue"] = json!(token);
        }
        status
    }

    pub(crate) fn headers(&self) -> Vec<(String, String)> {
        self.retry_after
            .map(|seconds| vec![("Retry-After".to_string(), seconds.to_string())])
            .unwrap_or_default()
    }

    pub(crate) fn resource_details(target: &Target, name: &str) -> Value {
        let mut details = json!({"name": name, "kind": target.resource.plural()});
        if target.group != ApiGroup::Core {
            details["group"] = json!(target.group.group());
        }
        details
    }

    pub(crate) fn not_found(target: &Target, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", target.qualified()),
        )
        .with_details(Self::resource_details(target, name))
    }

    pub(crate) fn namespace_not_found(namespace: &str) -> ApiError {
        let target = Target::cluster(Resource::Namespaces);
        ApiError::not_found(&target, namespace)
    }

    pub(crate) fn no_such_path() -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub(crate) fn already_exists(target: &Target, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", target.qualified()),
        )
        .with_details(Self::resource_details(target, name))
    }

    pub(crate) fn conflict(target: &Target, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                target.qualified()
            ),
        )
        .with_details(Self::resource_details(target, name))
    }

    pub(crate) fn modified(target: &Target, name: &str) -> ApiError {
        ApiError::conflict(
            target,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// [`ApiError::invalid`] for the object `name` of `target`'s kind and group.
    pub(crate) fn invalid_object(target: &Target, name: &str, errors: &[FieldError]) -> ApiError {
        ApiError::invalid(target.resource.kind(), target.group.group(), name, errors)
    }

    /// `errors.NewInvalid`: 422 with the field errors as causes.
    pub(crate) fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> ApiError {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let aggregate = match errors {
            [one] => one.to_string(),
            many => format!(
                "[{}]",
                many.iter()
                    .map(FieldError::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|err| json!({"reason": err.reason(), "message": err.body(), "field": err.field}))
            .collect();
        let mut details = json!({"name": name, "kind": kind, "causes": causes});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        ApiError::new(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {aggregate}"),
        )
        .with_details(details)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub(crate) fn method_not_allowed() -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    pub(crate) fn unsupported_media_type(accepted: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            ),
        )
    }

    pub(crate) fn expired(message: String) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    fn internal(cause: &str) -> ApiError {
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {cause}"),
        )
        .with_details(json!({"causes": [{"message": cause}]}))
    }

    fn too_many_requests() -> ApiError {
        let mut err = ApiError::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
        .with_details(json!({"retryAfterSeconds": 1}));
        err.retry_after = Some(1);
        err
    }

    pub(crate) fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    pub(crate) fn forbidden(user: &str, verb: &str, target: &Target) -> ApiError {
        let scope = match &target.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        let why = format!(
            "User \"{user}\" cannot {verb} resource \"{}\" in API group \"{}\" {scope}",
            target.rbac_resource(),
            target.group.group()
        );
        let what = match &target.name {
            Some(name) => format!("{} \"{name}\"", target.qualified()),
            None => target.qualified(),
        };
        ApiError::new(403, "Forbidden", format!("{what} is forbidden: {why}"))
            .with_details(Self::resource_details(target, target.name()))
    }

    pub(crate) fn forbidden_path(user: &str, path: &str) -> ApiError {
        ApiError::new(
            403,
            "Forbidden",
            format!("forbidden: User \"{user}\" cannot get path \"{path}\""),
        )
        .with_details(json!({}))
    }

    pub(crate) fn timeout(message: String, retry_after: u32) -> ApiError {
        let mut err = ApiError::new(504, "Timeout", format!("Timeout: {message}"))
            .with_details(json!({"retryAfterSeconds": retry_after}));
        err.retry_after = Some(retry_after);
        err
    }

    /// The Status an injected fault of HTTP `code` answers `target` with.
    pub(crate) fn injected(code: u16, user: &str, verb: &str, target: Option<&Target>) -> ApiError {
        let generic = Target::cluster(Resource::Nodes);
        let t = target.unwrap_or(&generic);
        let name = t.name().to_string();
        match code {
            400 => ApiError::bad_request("injected fault: bad request"),
            401 => ApiError::unauthorized(),
            403 => match target {
                Some(t) => ApiError::forbidden(user, verb, t),
                None => ApiError::forbidden_path(user, "/"),
            },
            404 => ApiError::not_found(t, &name),
            409 => ApiError::modified(t, &name),
            410 => ApiError::expired("injected fault: resource version expired".to_string()),
            422 => ApiError::invalid_object(
                t,
                &name,
                &[FieldError::invalid("metadata", json!(""), "injected fault")],
            ),
            429 => ApiError::too_many_requests(),
            500 => ApiError::internal("injected fault"),
            503 => ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => ApiError::timeout(
                "request did not complete within the allotted timeout".to_string(),
                1,
            ),
            other => ApiError::new(
                other,
                if other >= 500 { "InternalError" } else { "" },
                format!("injected fault: HTTP {other}"),
            ),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

/// A `field.Error` of k8s.io/apimachinery.
#[derive(Clone, Debug)]
pub(crate) struct FieldError {
    pub(crate) field: String,
    pub(crate) kind: FieldErrorKind,
    pub(crate) detail: String,
}

#[derive(Clone, Debug)]
pub(crate) enum FieldErrorKind {
    Required,
    Invalid(Value),
    Forbidden,
    TooLong,
    Duplicate(Value),
    /// The value and the supported values.
    NotSupported(Value, Vec<String>),
    /// A value of the wrong JSON type (`field.TypeInvalid`): the value shown is the type.
    TypeInvalid(Value),
    /// Too many items or properties (`field.TooMany`): the actual number.
    TooMany(Value),
    /// An invalid value shown as Go's `%#v` prints it (a struct or slice).
    InvalidGo(String),
}

impl FieldError {
    pub(crate) fn required(field: &str, detail: &str) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Required,
            detail: detail.to_string(),
        }
    }

    pub(crate) fn invalid(field: &str, value: Value, detail: &str) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Invalid(value),
            detail: detail.to_string(),
        }
    }

    pub(crate) fn forbidden(field: &str, detail: &str) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Forbidden,
            detail: detail.to_string(),
        }
    }

    pub(crate) fn too_long(field: &str, max: usize) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::TooLong,
            detail: format!("must have at most {max} bytes"),
        }
    }

    pub(crate) fn duplicate(field: &str, value: Value) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Duplicate(value),
            detail: String::new(),
        }
    }

    pub(crate) fn not_supported(field: &str, value: Value, supported: &[&str]) -> FieldError {
        FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::NotSupported(
                value,
                supported.iter().map(|s| s.to_string()).collect(),
            ),
            detail: String::new(),
        }
    }

    fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid(_) => "FieldValueInvalid",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::Duplicate(_) => "FieldValueDuplicate",
            FieldErrorKind::NotSupported(..) => "FieldValueNotSupported",
            FieldErrorKind::TypeInvalid(_) => "FieldValueTypeInvalid",
            FieldErrorKind::TooMany(_) => "FieldValueTooMany",
            FieldErrorKind::InvalidGo(_) => "FieldValueInvalid",
        }
    }

    /// `ErrorBody()`: the message without the field path.
    fn body(&self) -> String {
        let mut body = match &self.kind {
            FieldErrorKind::Required => "Required value".to_string(),
            FieldErrorKind::Invalid(value) => format!("Invalid value: {value}"),
            FieldErrorKind::Forbidden => "Forbidden".to_string(),
            FieldErrorKind::TooLong => "Too long".to_string(),
            FieldErrorKind::Duplicate(value) => format!("Duplicate value: {value}"),
            FieldErrorKind::NotSupported(value, supported) => {
                let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    quoted.join(", ")
                )
            }
            FieldErrorKind::TypeInvalid(value) => format!("Invalid value: {value}"),
            FieldErrorKind::TooMany(value) => format!("Too many: {value}"),
            FieldErrorKind::InvalidGo(shown) => format!("Invalid value: {shown}"),
        };
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}
