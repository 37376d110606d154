//! The catalogue's expected verdicts: herd's `kinds.txt`, one test a
//! line, `NAME  Allowed|Forbidden|Required` (herd7 `-variant vmsa`).

use std::collections::BTreeMap;

/// The architecture's verdict on a test's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Some execution satisfies the condition (`exists`, `~exists`), or
    /// some execution does not (`forall`).
    Allowed,
    /// No execution satisfies the condition (`exists`, `~exists`).
    Forbidden,
    /// Every execution satisfies the condition (`forall`).
    Required,
}

impl Kind {
    /// `Allowed`, `Forbidden` or `Required`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Allowed => "Allowed",
            Kind::Forbidden => "Forbidden",
            Kind::Required => "Required",
        }
    }
}

/// Parses a `kinds.txt`; errors name the 1-based line.
pub fn parse_kinds(text: &str) -> Result<BTreeMap<String, Kind>, (usize, String)> {
    let mut out = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let mut w = l.split_whitespace();
        let Some(name) = w.next() else { continue };
        let kind = match w.next() {
            Some("Allowed") => Kind::Allowed,
            Some("Forbidden") => Kind::Forbidden,
            Some("Required") => Kind::Required,
            other => {
                return Err((
                    i + 1,
                    format!(
                        "expected Allowed, Forbidden or Required after {name}, found {other:?}"
                    ),
                ))
            }
        };
        if out.insert(name.to_string(), kind).is_some() {
            return Err((i + 1, format!("{name} listed twice")));
        }
    }
    Ok(out)
}
