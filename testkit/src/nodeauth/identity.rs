//! Who made a request: the authentication of tokens, node tokens and client certificates.

use crate::errors::ApiError;
use crate::store::State;
use crate::INSECURE_PORT_USER;

/// Who made a request.
pub(crate) enum Identity {
    /// The default token's user, or the insecure port's.
    User(String),
    /// A node's credentials.
    Node(String),
    /// No credentials with `require_token`.
    Anonymous,
}

impl Identity {
    /// The user name, `None` for the anonymous user.
    pub(crate) fn user(&self) -> Option<String> {
        match self {
            Identity::User(user) => Some(user.clone()),
            Identity::Node(node) => Some(node_user(node)),
            Identity::Anonymous => None,
        }
    }

    pub(crate) fn node(&self) -> Option<&str> {
        match self {
            Identity::Node(node) => Some(node),
            _ => None,
        }
    }
}

/// The user name of a node's credentials.
pub(crate) fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

/// Bearer token authentication: 401 for a token that is neither the default one nor a node's.
pub(crate) fn authenticate(
    state: &State,
    authorization: Option<&str>,
    client_cn: Option<&str>,
) -> Result<Identity, ApiError> {
    let Some(value) = authorization else {
        // A verified client certificate (HTTPS): its Common Name, as kube-apiserver's x509
        // authenticator; `system:node:NAME` is the node NAME.
        if let Some(cn) = client_cn {
            return match cn.strip_prefix("system:node:") {
                Some(node) => Ok(Identity::Node(node.to_string())),
                None if cn == state.user => Ok(Identity::User(cn.to_string())),
                None => Err(ApiError::unauthorized()),
            };
        }
        return Ok(if state.require_token {
            Identity::Anonymous
        } else {
            Identity::User(INSECURE_PORT_USER.to_string())
        });
    };
    let token = value
        .strip_prefix("Bearer ")
        .map(str::trim)
        .ok_or_else(ApiError::unauthorized)?;
    if token == state.token {
        return Ok(Identity::User(state.user.clone()));
    }
    state
        .node_tokens
        .get(token)
        .map(|node| Identity::Node(node.clone()))
        .ok_or_else(ApiError::unauthorized)
}
