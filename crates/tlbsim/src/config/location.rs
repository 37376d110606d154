//! Configuration errors that name the file, the line and the field: TOML
//! parsing with line numbers, and the line of a key inside a section.

use serde::Deserialize;
use std::fmt;

/// A configuration error that names where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File name as given by the caller (or `<built-in NAME>`).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong, naming the field.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// An error at `file`, with the line of `key` inside `[section]` looked up
    /// in `text` when possible.
    pub fn at_key(file: &str, text: &str, section: &str, key: &str, message: String) -> Self {
        Self {
            file: file.to_string(),
            line: find_key_line(text, section, key),
            message,
        }
    }
}

/// Finds the 1-based line of `key = ...` inside `[section]` (or of the section
/// header when the key is empty).
pub fn find_key_line(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut in_section = section.is_empty();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            let name = line.trim_matches(|c| c == '[' || c == ']').trim();
            in_section = name == section;
            if in_section && key.is_empty() {
                return Some(i + 1);
            }
            continue;
        }
        if in_section && !key.is_empty() {
            if let Some((k, _)) = line.split_once('=') {
                if k.trim().trim_matches('"') == key {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}

/// Parses TOML `text` into `T`, turning serde/toml errors into a
/// [`ConfigError`] with a line number.
pub fn parse_toml<T: for<'de> Deserialize<'de>>(file: &str, text: &str) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let message = e.message().trim().to_string();
        // Name the field as the other errors do: "[section] key: ...".
        let message = match path.rsplit_once('.') {
            _ if path.is_empty() || path == "." || message.contains(&format!("`{path}`")) => {
                message
            }
            Some((section, key)) => format!("[{section}] {key}: {message}"),
            None => format!("{path}: {message}"),
        };
        ConfigError {
            file: file.to_string(),
            line,
            message,
        }
    })
}

/// Deserialises an already-parsed TOML table (an experiment file with
/// command-line changes applied, say); there are no lines to point at, so
/// errors name the field as "\[section\] key: message".
pub fn from_table<T: for<'de> Deserialize<'de>>(table: toml::Table) -> Result<T, String> {
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().message().trim().to_string();
        match path.rsplit_once('.') {
            Some((section, key)) => format!("[{section}] {key}: {message}"),
            None if path.is_empty() || path == "." => message,
            None => format!("{path}: {message}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Experiment;

    #[test]
    fn unknown_field_error_names_line_and_field() {
        let text = "[experiment]\nname = \"x\"\nprofile = \"ampere-32\"\n[machine]\ncpu = 3\n[workload]\nname = \"mprotect\"\n";
        let e = parse_toml::<Experiment>("x.toml", text).unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.to_string().contains("unknown field `cpu`"), "{e}");
        assert!(e.to_string().starts_with("x.toml:5:"), "{e}");
    }

    #[test]
    fn wrong_typed_value_error_names_line_section_and_key() {
        let text = "[experiment]\nname = \"x\"\nprofile = \"ampere-32\"\n[kernel]\nkpti = 3\n[workload]\nname = \"mprotect\"\n";
        let e = parse_toml::<Experiment>("x.toml", text).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x.toml:5: [kernel] kpti: invalid type: integer `3`"),
            "{e}"
        );
    }

    #[test]
    fn key_lines_are_found_inside_sections() {
        let text = "[a]\nx = 1\n[b]\nx = 2\n";
        assert_eq!(find_key_line(text, "b", "x"), Some(4));
        assert_eq!(find_key_line(text, "b", ""), Some(3));
        assert_eq!(find_key_line(text, "c", "x"), None);
    }
}
