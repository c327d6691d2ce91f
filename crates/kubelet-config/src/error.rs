//! Why a config document was refused: [`ConfigError`], the [`FieldError`]s
//! of a failed validation, and the [`Format`] a document was read as.

use std::fmt;

use super::{API_VERSION, KIND};

/// The syntax a config document was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The first non-whitespace byte was `{`.
    Json,
    /// Anything else.
    Yaml,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Json => "JSON",
            Format::Yaml => "YAML",
        })
    }
}

/// One failed validation rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FieldError {
    /// Path of the offending field, e.g. `port` or
    /// `evictionHard.memory.available`.
    pub path: String,
    /// What is wrong, in kubelet style, starting with the path:
    /// `port (70000) must be between 1 and 65535, inclusive`.
    pub message: String,
}

/// Why a config document was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The document is larger than [`MAX_CONFIG_BYTES`](super::MAX_CONFIG_BYTES).
    #[error("config is {size} bytes, larger than the {limit}-byte limit")]
    TooLarge {
        /// Size of the document.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Nested deeper than [`MAX_NESTING_DEPTH`](super::MAX_NESTING_DEPTH)
    /// levels (found by a pre-scan, before the YAML or JSON parser runs).
    #[error("config nesting is deeper than {limit} levels at line {line}, column {column} (a KubeletConfiguration needs only a few levels; flatten the document or fix unbalanced brackets)")]
    TooDeep {
        /// The limit.
        limit: usize,
        /// One-based line where the limit is first exceeded.
        line: usize,
        /// One-based column (in bytes).
        column: usize,
    },
    /// Not well-formed JSON/YAML, or not a mapping at the top level.
    #[error("failed to parse config as {format}: {message}")]
    Parse {
        /// The syntax the document was read as.
        format: Format,
        /// One-based line of the error, when the parser gives it.
        line: Option<usize>,
        /// One-based column of the error, when the parser gives it.
        column: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// A mapping has the same key twice.
    #[error("duplicate key {path:?}{}", location(.line, .column))]
    DuplicateKey {
        /// Path of the repeated key.
        path: String,
        /// One-based line (JSON only: YAML's parser does not locate the key).
        line: Option<usize>,
        /// One-based column (JSON only).
        column: Option<usize>,
    },
    /// A field that `KubeletConfiguration` v1beta1 does not have.
    #[error("unknown field {path:?}")]
    UnknownField {
        /// Path of the unknown field, e.g. `fooBar` or
        /// `authentication.webhook.fooBar`.
        path: String,
    },
    /// A value the kubelet could not decode into the field's type.
    #[error("field {path:?} must be {expected}, found {found}")]
    WrongType {
        /// Path of the field.
        path: String,
        /// What the field holds.
        expected: &'static str,
        /// What was found instead.
        found: String,
    },
    /// `kind` missing or not [`KIND`].
    #[error("{}", type_meta_message("kind", KIND, .found))]
    WrongKind {
        /// The `kind` found, if any.
        found: Option<String>,
    },
    /// `apiVersion` missing or not [`API_VERSION`].
    #[error("{}", type_meta_message("apiVersion", API_VERSION, .found))]
    WrongApiVersion {
        /// The `apiVersion` found, if any.
        found: Option<String>,
    },
    /// The document decodes but breaks the kubelet's rules; every broken
    /// rule is listed.
    #[error("{}", invalid_message(.0))]
    Invalid(Vec<FieldError>),
}

impl ConfigError {
    /// The refusal in the validator's own words, for a status that puts its
    /// own heading before them: each broken rule without the `invalid
    /// configuration: ` of [`fmt::Display`] (`port (70000) must be between 1
    /// and 65535, inclusive; healthzPort ...`); any other error as displayed
    /// (`unknown field "maxPodz"`).
    pub fn reasons(&self) -> String {
        match self {
            ConfigError::Invalid(errors) if !errors.is_empty() => errors
                .iter()
                .map(|e| e.message.as_str())
                .collect::<Vec<_>>()
                .join("; "),
            other => other.to_string(),
        }
    }
}

fn location(line: &Option<usize>, column: &Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

fn type_meta_message(field: &str, expected: &str, found: &Option<String>) -> String {
    match found {
        None => format!("{field} is missing, it must be {expected:?}"),
        Some(found) => format!("{field} must be {expected:?}, found {found:?}"),
    }
}

fn invalid_message(errors: &[FieldError]) -> String {
    if errors.is_empty() {
        return "invalid configuration".to_owned();
    }
    errors
        .iter()
        .map(|e| format!("invalid configuration: {}", e.message))
        .collect::<Vec<_>>()
        .join("; ")
}
