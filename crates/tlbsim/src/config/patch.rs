//! `--set SECTION.KEY=VALUE`: changes to an experiment file's keys given on
//! the command line, applied to its TOML before it is parsed.

use super::Experiment;

/// Applies `--set SECTION.KEY=VALUE` arguments to the experiment file's
/// text (already known to parse) and parses the result. A value is TOML; a
/// bare word that is not valid TOML is taken as a string. Errors name the
/// argument and the field.
pub fn apply_sets(text: &str, sets: &[String]) -> Result<Experiment, String> {
    let mut table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    for set in sets {
        let bad = || format!("--set {set:?}: expected SECTION.KEY=VALUE, e.g. kernel.kpti=false");
        let (path, value) = set.split_once('=').ok_or_else(bad)?;
        if value.contains('\n') {
            return Err(format!("--set {set:?}: the value spans lines"));
        }
        let (section, key) = path.trim().split_once('.').ok_or_else(bad)?;
        let (section, key) = (section.trim(), key.trim());
        if section.is_empty() || key.is_empty() || key.contains('.') {
            return Err(bad());
        }
        let value = value.trim();
        let value = toml::from_str::<toml::Table>(&format!("x = {value}"))
            .ok()
            .and_then(|t| t.get("x").cloned())
            .unwrap_or_else(|| toml::Value::String(value.to_string()));
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let Some(t) = entry.as_table_mut() else {
            return Err(format!("--set {set:?}: [{section}] is not a section"));
        };
        t.insert(key.to_string(), value);
    }
    super::from_table(table).map_err(|m| format!("--set {}: {m}", sets.join(" --set ")))
}
