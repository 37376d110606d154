//! File handling shared by the commands: reading experiment and profile
//! files (the library does no I/O), command-line overrides, writing results
//! whole or not at all, and quoting for printed command lines.

use std::path::Path;
use std::process::ExitCode;
use tlbsim::config::{
    apply_sets, find_key_line, is_profile_path, parse_profile, parse_toml, Experiment,
};

/// Command-line overrides of an experiment file.
pub struct Overrides {
    /// `--policy`.
    pub policy: Option<String>,
    /// `--profile`.
    pub profile: Option<String>,
    /// `--set SECTION.KEY=VALUE` arguments.
    pub sets: Vec<String>,
}

/// [`load`], printing the error; exit code 2 (bad input) on failure.
pub fn load_or_report(path: &Path, sets: &[String]) -> Result<(Experiment, String), ExitCode> {
    load(path, sets).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

/// Reads and parses an experiment file, applies `--set` arguments and
/// loads a profile file it names; errors name file, line and field.
/// Returns the experiment and the file's text.
pub fn load(path: &Path, sets: &[String]) -> Result<(Experiment, String), String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    let mut exp: Experiment = parse_toml(&name, &text).map_err(|e| e.to_string())?;
    if !sets.is_empty() {
        exp = apply_sets(&text, sets)?;
    }
    if is_profile_path(&exp.experiment.profile) {
        // A profile file is relative to the experiment file.
        let base = path.parent().unwrap_or(Path::new(""));
        let spec = exp.experiment.profile.clone();
        set_profile(&mut exp, &spec, base).map_err(|e| {
            match find_key_line(&text, "experiment", "profile") {
                Some(l) => format!("{name}:{l}: [experiment] profile: {e}"),
                None => format!("{name}: [experiment] profile: {e}"),
            }
        })?;
    }
    Ok((exp, text))
}

/// Points `exp` at the machine profile `spec`: a built-in profile name, or
/// a profile file (ending in `.toml`) relative to `base`, which is read and
/// parsed here (the library does no I/O). Errors name the profile file,
/// line and field.
pub fn set_profile(exp: &mut Experiment, spec: &str, base: &Path) -> Result<(), String> {
    exp.experiment.profile = spec.to_string();
    exp.profile_data = None;
    if is_profile_path(spec) {
        let file = base.join(spec);
        let shown = file.display().to_string();
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read profile file {shown}: {e}"))?;
        let p = parse_profile(&shown, &text).map_err(|e| e.to_string())?;
        // Check the file's own values here, so that errors point into it
        // (messages start with the field, e.g. "topology.cpus = 0 ...").
        p.validate().map_err(|m| {
            let line = m
                .split([' ', ','])
                .next()
                .and_then(|f| f.split_once('.'))
                .and_then(|(section, key)| find_key_line(&text, section, key));
            match line {
                Some(l) => format!("{shown}:{l}: {m}"),
                None => format!("{shown}: {m}"),
            }
        })?;
        exp.profile_data = Some(p);
    }
    Ok(())
}

/// Writes `bytes` to `path` whole or not at all (temp file + rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("out"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).map_err(|e| format!("{}: cannot write: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: cannot write: {e}", path.display())
    })
}

/// [`write_atomic`], printing the error; exit code 1 on failure.
pub fn write_or_report(path: &Path, bytes: &[u8]) -> ExitCode {
    match write_atomic(path, bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `s` quoted for a shell command line if it needs it.
pub fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-=,/:+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The printed form of `--set` arguments: ` --set A --set B`.
pub fn set_args(sets: &[String]) -> String {
    sets.iter()
        .map(|s| format!(" --set {}", shell_word(s)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("kernel.kpti=false"), "kernel.kpti=false");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }
}
