//! Label selectors as k8s.io/apimachinery/pkg/labels parses them: the lexer (identifiers,
//! `!`, `=`, `==`, `!=`, `(`, `)`, `,`, `in`, `notin`, `gt`/`>`, `lt`/`<`), the grammar
//! (`key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`,
//! `key>n`, `key<n`, comma-separated) and `NewRequirement`'s validation of keys (qualified
//! names) and values (label values), with the real error texts behind
//! `unable to parse requirement: `.

use crate::selectors::Requirement;
use crate::validation::{label_value, qualified_name};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Identifier(String),
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    Open,
    Close,
    Comma,
    In,
    NotIn,
    Greater,
    Less,
}

impl Token {
    /// The literal as the parser's messages quote it.
    fn literal(&self) -> String {
        match self {
            Token::Identifier(text) => text.clone(),
            Token::Bang => "!".into(),
            Token::Equals => "=".into(),
            Token::DoubleEquals => "==".into(),
            Token::NotEquals => "!=".into(),
            Token::Open => "(".into(),
            Token::Close => ")".into(),
            Token::Comma => ",".into(),
            Token::In => "in".into(),
            Token::NotIn => "notin".into(),
            Token::Greater => ">".into(),
            Token::Less => "<".into(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '>' | '<')
}

fn lex(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if is_special(c) {
            chars.next();
            let token = match (c, chars.peek()) {
                ('!', Some('=')) => {
                    chars.next();
                    Token::NotEquals
                }
                ('=', Some('=')) => {
                    chars.next();
                    Token::DoubleEquals
                }
                ('!', _) => Token::Bang,
                ('=', _) => Token::Equals,
                ('(', _) => Token::Open,
                (')', _) => Token::Close,
                (',', _) => Token::Comma,
                ('>', _) => Token::Greater,
                _ => Token::Less,
            };
            tokens.push(token);
            continue;
        }
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || is_special(c) {
                break;
            }
            word.push(c);
            chars.next();
        }
        tokens.push(match word.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Identifier(word),
        });
    }
    tokens
}

/// The binary operators, as `found '...', expected: ...` lists them.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        token
    }

    fn found(token: Option<&Token>) -> String {
        token.map(Token::literal).unwrap_or_default()
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (key, negated) = match self.next() {
            Some(Token::Bang) => match self.next() {
                Some(Token::Identifier(key)) => (key, true),
                other => {
                    return Err(format!(
                        "found '{}', expected: identifier after '!'",
                        Self::found(other.as_ref())
                    ))
                }
            },
            Some(Token::Identifier(key)) => (key, false),
            other => {
                return Err(format!(
                    "found '{}', expected: !, identifier, or 'end of string'",
                    Self::found(other.as_ref())
                ))
            }
        };
        if negated || matches!(self.peek(), None | Some(Token::Comma)) {
            validate(&key, &[])?;
            return Ok(if negated {
                Requirement::NotExists(key)
            } else {
                Requirement::Exists(key)
            });
        }
        let operator = self.next();
        match operator {
            Some(Token::In | Token::NotIn) => {
                let values = self.set()?;
                if values.is_empty() {
                    let mut errs = key_error(&key);
                    errs.push(
                        "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
                            .to_string(),
                    );
                    return Err(aggregate(errs));
                }
                validate(&key, &values)?;
                Ok(if operator == Some(Token::In) {
                    Requirement::In(key, values)
                } else {
                    Requirement::NotIn(key, values)
                })
            }
            Some(Token::Equals | Token::DoubleEquals | Token::NotEquals) => {
                let value = match self.peek() {
                    None | Some(Token::Comma) => String::new(),
                    Some(Token::Identifier(_)) => match self.next() {
                        Some(Token::Identifier(value)) => value,
                        _ => String::new(),
                    },
                    other => {
                        return Err(format!(
                            "found '{}', expected: identifier",
                            Self::found(other)
                        ))
                    }
                };
                validate(&key, std::slice::from_ref(&value))?;
                Ok(if operator == Some(Token::NotEquals) {
                    Requirement::NotEquals(key, value)
                } else {
                    Requirement::Equals(key, value)
                })
            }
            Some(Token::Greater | Token::Less) => {
                let value = match self.next() {
                    Some(Token::Identifier(value)) => value,
                    other => {
                        return Err(format!(
                            "found '{}', expected: identifier",
                            Self::found(other.as_ref())
                        ))
                    }
                };
                validate(&key, std::slice::from_ref(&value))?;
                let number: i64 = value.parse().map_err(|_| {
                    format!(
                        "values[0]: Invalid value: {value:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                    )
                })?;
                Ok(if operator == Some(Token::Greater) {
                    Requirement::GreaterThan(key, number)
                } else {
                    Requirement::LessThan(key, number)
                })
            }
            other => Err(format!(
                "found '{}', expected: {BINARY_OPERATORS}",
                Self::found(other.as_ref())
            )),
        }
    }

    /// `( value, ... )`.
    fn set(&mut self) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Token::Open) => {}
            other => {
                return Err(format!(
                    "found '{}', expected: '('",
                    Self::found(other.as_ref())
                ))
            }
        }
        let mut values = Vec::new();
        if self.peek() == Some(&Token::Close) {
            self.next();
            return Ok(values);
        }
        loop {
            match self.next() {
                Some(Token::Identifier(value)) => values.push(value),
                // `(a,)` and `(,a)` hold an empty value.
                Some(Token::Comma) => {
                    values.push(String::new());
                    continue;
                }
                Some(Token::Close) => {
                    values.push(String::new());
                    return Ok(values);
                }
                other => {
                    return Err(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        Self::found(other.as_ref())
                    ))
                }
            }
            match self.next() {
                Some(Token::Comma) => {}
                Some(Token::Close) => return Ok(values),
                other => {
                    return Err(format!(
                        "found '{}', expected: ',' or ')'",
                        Self::found(other.as_ref())
                    ))
                }
            }
        }
    }
}

fn key_error(key: &str) -> Vec<String> {
    let errs = qualified_name(key);
    if errs.is_empty() {
        Vec::new()
    } else {
        vec![format!("key: Invalid value: {key:?}: {}", errs.join("; "))]
    }
}

/// `NewRequirement`'s checks: the key is a qualified name, every value a label value.
fn validate(key: &str, values: &[String]) -> Result<(), String> {
    let mut errs = key_error(key);
    for (i, value) in values.iter().enumerate() {
        let problems = label_value(value);
        if !problems.is_empty() {
            errs.push(format!(
                "values[{i}][{key}]: Invalid value: {value:?}: {}",
                problems.join("; ")
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(aggregate(errs))
    }
}

/// An aggregate error's text: one error alone, several in brackets.
fn aggregate(errs: Vec<String>) -> String {
    match errs.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", errs.join(", ")),
    }
}

/// Parses a label selector; `Err` is the message of the 400 the real server answers.
pub(crate) fn parse(text: &str) -> Result<Vec<Requirement>, String> {
    let mut parser = Parser {
        tokens: lex(text),
        pos: 0,
    };
    let mut requirements = Vec::new();
    loop {
        match parser.peek() {
            None => return Ok(requirements),
            Some(Token::Identifier(_) | Token::Bang) => {}
            Some(other) => {
                return Err(format!(
                    "found '{}', expected: !, identifier, or 'end of string'",
                    other.literal()
                ))
            }
        }
        let requirement = parser
            .requirement()
            .map_err(|err| format!("unable to parse requirement: {err}"))?;
        requirements.push(requirement);
        match parser.next() {
            None => return Ok(requirements),
            Some(Token::Comma) => match parser.peek() {
                Some(Token::Identifier(_) | Token::Bang) => {}
                other => {
                    return Err(format!(
                        "found '{}', expected: identifier after ','",
                        Parser::found(other)
                    ))
                }
            },
            Some(other) => {
                return Err(format!(
                    "found '{}', expected: ',' or 'end of string'",
                    other.literal()
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_of_label_selectors() {
        let parsed = parse("a=b, c==d,e!=f,g in (h, i),j notin (k),l,!m,n>3").unwrap();
        assert_eq!(parsed.len(), 8);
        assert!(matches!(&parsed[3], Requirement::In(k, v) if k == "g" && v == &["h", "i"]));
        assert!(matches!(&parsed[6], Requirement::NotExists(k) if k == "m"));
        assert!(matches!(&parsed[7], Requirement::GreaterThan(k, 3) if k == "n"));
        assert!(matches!(&parse("x=").unwrap()[0], Requirement::Equals(_, v) if v.is_empty()));
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn invalid_selectors_have_the_real_messages() {
        let err = parse("a$=b").unwrap_err();
        assert!(
            err.starts_with("unable to parse requirement: key: Invalid value: \"a$\": name part must consist of"),
            "{err}"
        );
        let err = parse("app=a b").unwrap_err();
        assert_eq!(err, "found 'b', expected: ',' or 'end of string'");
        let err = parse("app=-x").unwrap_err();
        assert!(
            err.starts_with("unable to parse requirement: values[0][app]: Invalid value: \"-x\": a valid label must be"),
            "{err}"
        );
        let err = parse("app in ()").unwrap_err();
        assert!(err.ends_with("values set can't be empty"), "{err}");
        let err = parse("app in a").unwrap_err();
        assert_eq!(err, "unable to parse requirement: found 'a', expected: '('");
        let err = parse("a,").unwrap_err();
        assert_eq!(err, "found '', expected: identifier after ','");
        let err = parse("=a").unwrap_err();
        assert_eq!(
            err,
            "found '=', expected: !, identifier, or 'end of string'"
        );
    }
}
