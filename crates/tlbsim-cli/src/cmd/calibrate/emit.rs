//! Writing the calibrated profile's TOML: the base (nearest built-in)
//! profile's sections and keys in its order, each key either measured
//! (value and "measured by calibrate" comment) or copied from the base
//! with its comment and the reason it was not measured.

use std::collections::BTreeMap;

/// One value calibrate sets, with its comment.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The value.
    pub value: toml::Value,
    /// Where it comes from (one line).
    pub comment: String,
}

/// The values calibrate sets, by (section, key); section "" is the top level.
pub type Values = BTreeMap<(String, String), Entry>;

/// Adds `key = value  # comment` under `section`.
pub fn set(
    v: &mut Values,
    section: &str,
    key: &str,
    value: impl Into<toml::Value>,
    comment: String,
) {
    let e = Entry {
        value: value.into(),
        comment: comment.replace('\n', " "),
    };
    v.insert((section.to_string(), key.to_string()), e);
}

/// A `key = value # comment` line of a profile file: (key, value text,
/// comment). `None` for blank lines, comments and section headers.
pub fn split_line(line: &str) -> Option<(&str, &str, &str)> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') || t.starts_with('[') {
        return None;
    }
    let (key, rest) = t.split_once('=')?;
    let mut in_str = false;
    let hash = rest.char_indices().find(|&(_, c)| {
        if c == '"' {
            in_str = !in_str;
        }
        c == '#' && !in_str
    });
    let (value, comment) = match hash {
        Some((i, _)) => (&rest[..i], rest[i + 1..].trim()),
        None => (rest, ""),
    };
    Some((key.trim(), value.trim(), comment))
}

/// A section header's name (`[kernel]` gives `kernel`).
fn header(line: &str) -> Option<&str> {
    let t = line.trim();
    t.strip_prefix('[')?.strip_suffix(']').map(str::trim)
}

/// The base profile's keys in file order: (section, key, value text, comment).
fn base_keys(text: &str) -> Vec<(String, String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(h) = header(line) {
            section = h.to_string();
        } else if let Some((k, v, c)) = split_line(line) {
            out.push((section.clone(), k.to_string(), v.to_string(), c.to_string()));
        }
    }
    out
}

/// The profile text: `head` (comment lines), then every key of the base
/// profile `base` (built-in `base_name`) in its order, measured values
/// replacing copied ones, then measured keys the base lacks. Returns the
/// text and the `section.key`s copied from the base.
pub fn render(
    head: &str,
    base_name: &str,
    base: &str,
    values: &Values,
    why_not: impl Fn(&str, &str) -> String,
) -> (String, Vec<String>) {
    let mut sections: Vec<String> = vec![String::new()];
    let mut lines: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut copied = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    for (section, key, value, comment) in base_keys(base) {
        if !sections.contains(&section) {
            sections.push(section.clone());
        }
        let out = lines.entry(section.clone()).or_default();
        let id = (section.clone(), key.clone());
        if let Some(e) = values.get(&id) {
            out.push(format!("{key} = {}  # {}", e.value, e.comment));
        } else {
            let why = why_not(&section, &key);
            out.push(format!(
                "{key} = {value}  # copied from built-in {base_name} ({why}): {comment}"
            ));
            copied.push(if section.is_empty() {
                key.clone()
            } else {
                format!("{section}.{key}")
            });
        }
        done.insert(id);
    }
    for ((section, key), e) in values {
        if done.contains(&(section.clone(), key.clone())) {
            continue;
        }
        if !sections.contains(section) {
            sections.push(section.clone());
        }
        let line = format!("{key} = {}  # {}", e.value, e.comment);
        lines.entry(section.clone()).or_default().push(line);
    }
    let mut text = head.to_string();
    for s in &sections {
        if !s.is_empty() {
            text.push_str(&format!("\n[{s}]\n"));
        }
        for l in lines.get(s).into_iter().flatten() {
            text.push_str(l);
            text.push('\n');
        }
    }
    (text, copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "# base\nname = \"b\"\narch = \"x86\"\n\n[kernel]\nsyscall_ns = 100 # measured: host\nfork_ns = 5 # estimated: # of forks\n\n[x86]\npcid = true\n";

    #[test]
    fn lines_split_at_the_comment_outside_strings() {
        assert_eq!(
            split_line("a = \"x#y\"  # c # d"),
            Some(("a", "\"x#y\"", "c # d"))
        );
        assert_eq!(split_line("b=1"), Some(("b", "1", "")));
        assert_eq!(split_line("# x = 1"), None);
        assert_eq!(split_line("[kernel]"), None);
    }

    #[test]
    fn measured_values_replace_copied_ones_in_base_order() {
        let mut v = Values::new();
        set(&mut v, "", "name", "calibrated", "set by calibrate".into());
        set(
            &mut v,
            "kernel",
            "syscall_ns",
            80,
            "measured by calibrate".into(),
        );
        set(
            &mut v,
            "kernel",
            "atomic_ns",
            9,
            "measured by calibrate".into(),
        );
        let (text, copied) = render("# head\n", "b", BASE, &v, |s, k| format!("no {s}.{k}"));
        assert_eq!(copied, vec!["arch", "kernel.fork_ns", "x86.pcid"]);
        let want = "# head\nname = \"calibrated\"  # set by calibrate\narch = \"x86\"  # copied from built-in b (no .arch): \n\n[kernel]\nsyscall_ns = 80  # measured by calibrate\nfork_ns = 5  # copied from built-in b (no kernel.fork_ns): estimated: # of forks\natomic_ns = 9  # measured by calibrate\n\n[x86]\npcid = true  # copied from built-in b (no x86.pcid): \n";
        assert_eq!(text, want);
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(parsed["kernel"]["syscall_ns"].as_integer(), Some(80));
    }
}
