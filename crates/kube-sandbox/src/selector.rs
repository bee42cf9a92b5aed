//! Label and field selectors, parsed with the grammar and error texts of the API server.

use std::collections::BTreeMap;

use serde_json::Value;

use super::resources::Resource;
use super::status::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq,
    NotEq,
    In,
    NotIn,
    Exists,
    NotExists,
}

#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector(Vec<Requirement>);

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Eq,
    DoubleEq,
    NotEq,
    Not,
    Open,
    Close,
    Comma,
    End,
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Tok::Ident(s) => s.clone(),
            Tok::Eq => "=".into(),
            Tok::DoubleEq => "==".into(),
            Tok::NotEq => "!=".into(),
            Tok::Not => "!".into(),
            Tok::Open => "(".into(),
            Tok::Close => ")".into(),
            Tok::Comma => ",".into(),
            Tok::End => "".into(),
        }
    }
}

fn tokenize(s: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => i += 1,
            '(' => {
                out.push(Tok::Open);
                i += 1;
            }
            ')' => {
                out.push(Tok::Close);
                i += 1;
            }
            ',' => {
                out.push(Tok::Comma);
                i += 1;
            }
            '=' | '!' => {
                let next = chars.get(i + 1).copied();
                match (c, next) {
                    ('=', Some('=')) => {
                        out.push(Tok::DoubleEq);
                        i += 2;
                    }
                    ('!', Some('=')) => {
                        out.push(Tok::NotEq);
                        i += 2;
                    }
                    ('=', _) => {
                        out.push(Tok::Eq);
                        i += 1;
                    }
                    _ => {
                        out.push(Tok::Not);
                        i += 1;
                    }
                }
            }
            _ => {
                let start = i;
                while i < chars.len() && !" \t(),=!".contains(chars[i]) {
                    i += 1;
                }
                out.push(Tok::Ident(chars[start..i].iter().collect()));
            }
        }
    }
    out.push(Tok::End);
    out
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let toks = tokenize(s);
        let mut pos = 0;
        let mut reqs = Vec::new();
        if toks[0] == Tok::End {
            return Ok(LabelSelector(reqs));
        }
        loop {
            let req = parse_requirement(&toks, &mut pos)
                .map_err(|m| ApiError::bad_request(format!("unable to parse requirement: {m}")))?;
            reqs.push(req);
            match &toks[pos] {
                Tok::End => break,
                Tok::Comma => pos += 1,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        other.text()
                    )));
                }
            }
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| {
            let v = labels.get(&r.key);
            match r.op {
                Op::Eq => v == r.values.first(),
                Op::NotEq => v != r.values.first(),
                Op::In => v.is_some_and(|v| r.values.contains(v)),
                Op::NotIn => v.is_none_or(|v| !r.values.contains(v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
            }
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches_object(&self, obj: &Value) -> bool {
        self.is_empty() || self.matches(&labels_of(obj))
    }
}

fn advance(toks: &[Tok], pos: &mut usize) -> Tok {
    let t = toks[*pos].clone();
    if t != Tok::End {
        *pos += 1;
    }
    t
}

fn parse_requirement(toks: &[Tok], pos: &mut usize) -> Result<Requirement, String> {
    let first = advance(toks, pos);
    if first == Tok::Not {
        return match advance(toks, pos) {
            Tok::Ident(key) => Ok(Requirement {
                key,
                op: Op::NotExists,
                values: vec![],
            }),
            other => Err(format!("found '{}', expected: identifier", other.text())),
        };
    }
    let Tok::Ident(key) = first else {
        return Err(format!(
            "found '{}', expected: !, identifier, or 'end of string'",
            first.text()
        ));
    };
    if matches!(toks[*pos], Tok::End | Tok::Comma) {
        return Ok(Requirement {
            key,
            op: Op::Exists,
            values: vec![],
        });
    }
    let op = match advance(toks, pos) {
        Tok::Eq | Tok::DoubleEq => Op::Eq,
        Tok::NotEq => Op::NotEq,
        Tok::Ident(w) if w == "in" => Op::In,
        Tok::Ident(w) if w == "notin" => Op::NotIn,
        other => {
            return Err(format!(
                "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                other.text()
            ));
        }
    };
    let values = if matches!(op, Op::In | Op::NotIn) {
        match advance(toks, pos) {
            Tok::Open => {}
            other => return Err(format!("found '{}' expected: '('", other.text())),
        }
        let mut values = Vec::new();
        loop {
            match advance(toks, pos) {
                Tok::Ident(v) => values.push(v),
                Tok::Close => break,
                Tok::Comma => continue,
                other => {
                    return Err(format!(
                        "found '{}', expected: ',', or identifier",
                        other.text()
                    ));
                }
            }
        }
        values
    } else {
        match &toks[*pos] {
            Tok::Ident(v) => {
                *pos += 1;
                vec![v.clone()]
            }
            Tok::End | Tok::Comma => vec![String::new()],
            other => return Err(format!("found '{}', expected: identifier", other.text())),
        }
    };
    Ok(Requirement { key, op, values })
}

pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// A parsed field selector: `key=value`, `key==value`, `key!=value`, comma-separated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str, r: &Resource) -> Result<Self, ApiError> {
        let mut out = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (key, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let known = key == "metadata.name"
                || key == "metadata.namespace"
                || r.field_labels.is_some_and(|f| f.contains(&key));
            if !known {
                return Err(ApiError::bad_request(match r.field_labels {
                    Some(_) => format!("field label not supported: {key}"),
                    None => format!(
                        "\"{key}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    ),
                }));
            }
            out.push((key.to_owned(), eq, value.to_owned()));
        }
        Ok(FieldSelector(out))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(key, eq, value)| {
            let actual = field_value(obj, key);
            (actual == *value) == *eq
        })
    }

    /// The value of `metadata.namespace=` if the selector pins one.
    pub fn namespace(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.namespace" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

fn field_value(obj: &Value, key: &str) -> String {
    let path = match key {
        "source" => "source.component",
        other => other,
    };
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_grammar() {
        let l = labels(&[("a", "x"), ("tier", "x")]);
        for (sel, expected) in [
            ("a=x", true),
            ("a==x", true),
            ("a!=x", false),
            ("a in (x,y)", true),
            ("a notin (x)", false),
            ("a", true),
            ("!a", false),
            ("a,tier=x", true),
            ("a in (y), tier", false),
            ("", true),
            ("b!=x", true),
            ("b notin (x)", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&l),
                expected,
                "{sel}"
            );
        }
    }

    #[test]
    fn label_selector_errors_read_like_the_api_server() {
        assert_eq!(
            LabelSelector::parse("a in x").unwrap_err().message,
            "unable to parse requirement: found 'x' expected: '('"
        );
        assert_eq!(
            LabelSelector::parse("a=b=c").unwrap_err().message,
            "found '=', expected: ',' or 'end of string'"
        );
    }
}
