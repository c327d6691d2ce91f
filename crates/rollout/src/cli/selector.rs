//! `--selector` / `-l` as `kubectl get nodes -l` takes it (k8s.io/apimachinery's
//! `labels.Parse`): `key=value`, `key==value`, `key!=value`, `key in (a,b)`,
//! `key notin (a,b)`, `key` and `!key`, comma-separated. Equalities become the spec's
//! `nodeSelector`, the rest its `nodeSelectorExpressions`. `key>n` / `key<n` are refused:
//! a LabelSelector has no such operator.

use std::collections::BTreeMap;

use kp_contract::rollout::{NodeSelector, SelectorOperator, SelectorRequirement};
use kp_kubelet_config::labels::{check_label_value, check_qualified_name};

/// Why a selector cannot be used; the text is shown after `--selector <TEXT>: `.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("expected {expected} after {after:?}, found {found}")]
    Unexpected {
        expected: &'static str,
        after: String,
        found: String,
    },
    #[error("{0:?}: `>` and `<` compare numbers in node affinity, not in a label selector; use in (...) or notin (...)")]
    Ordering(String),
    #[error("label key {key:?}: {why}")]
    Key { key: String, why: String },
    #[error("label value {value:?} of {key:?}: {why}")]
    Value {
        key: String,
        value: String,
        why: String,
    },
    #[error("{key}={first} and {key}={second} can never both hold")]
    Conflict {
        key: String,
        first: String,
        second: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Bang,
    Equals,
    NotEquals,
    Open,
    Close,
    Comma,
    Ordering,
    End,
}

impl Token {
    fn shown(&self) -> String {
        match self {
            Token::Word(w) => format!("{w:?}"),
            Token::Bang => "\"!\"".into(),
            Token::Equals => "\"=\"".into(),
            Token::NotEquals => "\"!=\"".into(),
            Token::Open => "\"(\"".into(),
            Token::Close => "\")\"".into(),
            Token::Comma => "\",\"".into(),
            Token::Ordering => "\">\" or \"<\"".into(),
            Token::End => "the end".into(),
        }
    }
}

/// Characters that end a word, as the apimachinery lexer has them.
fn special(c: char) -> bool {
    c.is_whitespace() || matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>')
}

fn lex(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        chars.next();
        let next_is_eq = chars.peek() == Some(&'=');
        tokens.push(match c {
            '!' if next_is_eq => {
                chars.next();
                Token::NotEquals
            }
            '!' => Token::Bang,
            '=' => {
                if next_is_eq {
                    chars.next();
                }
                Token::Equals
            }
            '(' => Token::Open,
            ')' => Token::Close,
            ',' => Token::Comma,
            '<' | '>' => Token::Ordering,
            _ => {
                let mut word = c.to_string();
                while let Some(&c) = chars.peek() {
                    if special(c) {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                Token::Word(word)
            }
        });
    }
    tokens.push(Token::End);
    tokens
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    text: String,
}

impl Parser {
    fn next(&mut self) -> Token {
        let t = self.tokens.get(self.at).cloned().unwrap_or(Token::End);
        self.at += 1;
        t
    }

    fn peek(&self) -> &Token {
        self.tokens.get(self.at).unwrap_or(&Token::End)
    }

    /// The text before the current token, for messages.
    fn after(&self, what: &str) -> String {
        if what.is_empty() {
            self.text.clone()
        } else {
            what.to_string()
        }
    }

    fn unexpected(&self, expected: &'static str, after: &str, found: &Token) -> SelectorError {
        SelectorError::Unexpected {
            expected,
            after: self.after(after),
            found: found.shown(),
        }
    }

    fn key(&mut self, after: &str) -> Result<String, SelectorError> {
        match self.next() {
            Token::Word(w) => {
                check_qualified_name(&w).map_err(|why| SelectorError::Key {
                    key: w.clone(),
                    why,
                })?;
                Ok(w)
            }
            other => Err(self.unexpected("a label key", after, &other)),
        }
    }

    fn value(&mut self, key: &str) -> Result<String, SelectorError> {
        // An empty value (`key=`) is a value, as in kubectl.
        let value = match self.peek().clone() {
            Token::Word(w) => {
                self.next();
                w
            }
            _ => String::new(),
        };
        check_label_value(&value).map_err(|why| SelectorError::Value {
            key: key.to_string(),
            value: value.clone(),
            why,
        })?;
        Ok(value)
    }

    /// `( v1, v2 )`: at least one value.
    fn values(&mut self, key: &str, op: &str) -> Result<Vec<String>, SelectorError> {
        let after = format!("{key} {op}");
        let open = self.next();
        if open != Token::Open {
            return Err(self.unexpected("\"(\"", &after, &open));
        }
        let mut values = Vec::new();
        loop {
            match self.peek().clone() {
                Token::Word(_) => values.push(self.value(key)?),
                other => return Err(self.unexpected("a value", &after, &other)),
            }
            match self.next() {
                Token::Comma => continue,
                Token::Close => break,
                other => return Err(self.unexpected("\",\" or \")\"", &after, &other)),
            }
        }
        Ok(values)
    }

    /// One requirement: `Ok(Err((k, v)))` is an equality, `Ok(Ok(req))` a set-based one.
    fn requirement(
        &mut self,
    ) -> Result<Result<SelectorRequirement, (String, String)>, SelectorError> {
        let requirement = |key: String, operator, values| {
            Ok(Ok(SelectorRequirement {
                key,
                operator,
                values,
            }))
        };
        if *self.peek() == Token::Bang {
            self.next();
            let key = self.key("!")?;
            return requirement(key, SelectorOperator::DoesNotExist, Vec::new());
        }
        let key = self.key("")?;
        match self.peek().clone() {
            Token::Comma | Token::End => requirement(key, SelectorOperator::Exists, Vec::new()),
            Token::Equals => {
                self.next();
                let value = self.value(&key)?;
                Ok(Err((key, value)))
            }
            Token::NotEquals => {
                self.next();
                let value = self.value(&key)?;
                requirement(key, SelectorOperator::NotIn, vec![value])
            }
            Token::Ordering => Err(SelectorError::Ordering(self.text.clone())),
            Token::Word(w) if w == "in" || w == "notin" => {
                self.next();
                let values = self.values(&key, &w)?;
                let op = if w == "in" {
                    SelectorOperator::In
                } else {
                    SelectorOperator::NotIn
                };
                requirement(key, op, values)
            }
            Token::Word(w) if w == "gt" || w == "lt" => {
                Err(SelectorError::Ordering(self.text.clone()))
            }
            other => Err(self.unexpected("=, ==, !=, in, notin or \",\"", &key, &other)),
        }
    }
}

/// Parses a selector as kubectl does; an empty text selects every node.
pub fn parse(text: &str) -> Result<NodeSelector, SelectorError> {
    let mut p = Parser {
        tokens: lex(text),
        at: 0,
        text: text.trim().to_string(),
    };
    let mut selector = NodeSelector::default();
    if *p.peek() == Token::End {
        return Ok(selector);
    }
    loop {
        match p.requirement()? {
            Ok(req) => selector.expressions.push(req),
            Err((key, value)) => {
                if let Some(first) = selector.labels.get(&key).filter(|v| **v != value) {
                    return Err(SelectorError::Conflict {
                        key,
                        first: first.clone(),
                        second: value,
                    });
                }
                selector.labels.insert(key, value);
            }
        }
        match p.next() {
            Token::Comma => continue,
            Token::End => break,
            other => return Err(p.unexpected("\",\" or the end", "", &other)),
        }
    }
    Ok(selector)
}

/// The spec fields for `selector` (`nodeSelector`, `nodeSelectorExpressions`): both
/// always, so that a new `-l` replaces the old one whole (a merge patch replaces the
/// list; [`unset_old_labels`] does it for the map).
pub fn spec_fields(
    selector: &NodeSelector,
) -> Result<
    (
        serde_json::Map<String, serde_json::Value>,
        serde_json::Value,
    ),
    serde_json::Error,
> {
    let labels = selector
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    Ok((labels, serde_json::to_value(&selector.expressions)?))
}

/// In a merge patch's `nodeSelector`: `null` for each of the `old` labels the new
/// selector does not have (a merge patch merges maps key by key).
pub fn unset_old_labels(
    labels: &mut serde_json::Map<String, serde_json::Value>,
    old: &BTreeMap<String, String>,
) {
    for key in old.keys() {
        labels.entry(key.clone()).or_insert(serde_json::Value::Null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SelectorOperator::*;

    fn req(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement::new(key, operator, values)
    }

    #[test]
    fn every_form_kubectl_takes() {
        let s =
            parse("pool in (a, b),zone notin (z9),gpu,!spot,tier!=db,role==worker,env=").unwrap();
        assert_eq!(
            s.labels,
            BTreeMap::from([
                ("role".to_string(), "worker".to_string()),
                ("env".to_string(), String::new())
            ])
        );
        assert_eq!(
            s.expressions,
            vec![
                req("pool", In, &["a", "b"]),
                req("zone", NotIn, &["z9"]),
                req("gpu", Exists, &[]),
                req("spot", DoesNotExist, &[]),
                req("tier", NotIn, &["db"]),
            ]
        );
        assert_eq!(
            parse("pool in(a,b)").unwrap().expressions,
            vec![req("pool", In, &["a", "b"])]
        );
        assert_eq!(
            parse("node-role.kubernetes.io/worker")
                .unwrap()
                .expressions
                .len(),
            1
        );
        assert!(parse("").unwrap().is_empty());
        assert!(parse("  ").unwrap().is_empty());
    }

    #[test]
    fn the_printed_form_parses_back_to_the_same_selector() {
        for text in ["pool=a,zone in (x,y),!gpu", "a notin (b),c", "k="] {
            let s = parse(text).unwrap();
            assert_eq!(parse(&s.to_string()).unwrap(), s, "{text}");
        }
    }

    #[test]
    fn what_kubectl_refuses_is_refused_with_the_place() {
        let cases = [
            ("pool in (a,b", "expected \",\" or \")\""),
            ("pool in ()", "expected a value"),
            ("pool in a", "expected \"(\""),
            ("=a", "expected a label key"),
            ("pool a", "expected =, ==, !=, in, notin"),
            ("a>1", "not in a label selector"),
            ("a gt 1", "not in a label selector"),
            ("Bad Key=1", "expected =, ==, !=, in, notin"),
            ("-x=1", "label key \"-x\""),
            ("a=b c", "expected \",\" or the end"),
            ("a=-b", "label value \"-b\""),
            ("a=b,a=c", "a=b and a=c can never both hold"),
            ("a,", "expected a label key"),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        assert!(parse("a=b,a=b").is_ok());
    }

    #[test]
    fn a_new_selector_replaces_the_old_one_whole() {
        let old = BTreeMap::from([("pool".to_string(), "a".to_string())]);
        let (mut labels, exprs) = spec_fields(&parse("zone in (z1)").unwrap()).unwrap();
        unset_old_labels(&mut labels, &old);
        assert_eq!(
            serde_json::Value::Object(labels),
            serde_json::json!({"pool": null})
        );
        assert_eq!(
            exprs,
            serde_json::json!([{"key": "zone", "operator": "In", "values": ["z1"]}])
        );
    }
}
