//! Why a run could not start or stopped: [`SimError`], and how it is
//! located in the experiment file or on the command line.

use crate::driver::RunError;

/// A failed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// The configuration is invalid (message names the field).
    Config(String),
    /// A field of the experiment file is invalid.
    Field {
        /// TOML section (`kernel`, `workload`, ...).
        section: String,
        /// Key within the section.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An option the caller gave in [`RunOptions`](super::RunOptions) (a command-line flag)
    /// is invalid.
    Flag {
        /// The flag and its value as given (`--cpus 5000`).
        flag: String,
        /// What is wrong.
        message: String,
    },
    /// The run stopped.
    Run(RunError),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Config(m) => write!(f, "{m}"),
            SimError::Field {
                section,
                key,
                message,
            } => write!(f, "[{section}] {key}: {message}"),
            SimError::Flag { flag, message } => write!(f, "{flag}: {message}"),
            SimError::Run(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SimError {}

impl SimError {
    /// The error as a person can act on it, located in the experiment file
    /// `file` whose text is `text`: a field error names the file, the line
    /// of the key (when found) and the field (`x.toml:12: [kernel] kpti:
    /// ...`); a configuration error names the file; a run error is given
    /// as is.
    pub fn located(&self, file: &str, text: &str) -> String {
        self.located_with_sets(file, text, &[])
    }

    /// [`SimError::located`] for an experiment file changed by `--set
    /// SECTION.KEY=VALUE` arguments `sets`: a field that one of them set is
    /// blamed on that argument, not on a line of the file.
    pub fn located_with_sets(&self, file: &str, text: &str, sets: &[String]) -> String {
        match self {
            SimError::Field {
                section,
                key,
                message,
            } if sets.iter().any(|s| set_names(s, section, key)) => {
                let set = sets
                    .iter()
                    .rev()
                    .find(|s| set_names(s, section, key))
                    .expect("found above");
                format!("--set {set}: [{section}] {key}: {message}")
            }
            SimError::Field {
                section,
                key,
                message,
            } => match crate::config::find_key_line(text, section, key) {
                Some(l) => format!("{file}:{l}: [{section}] {key}: {message}"),
                None => format!("{file}: [{section}] {key}: {message}"),
            },
            SimError::Config(m) => format!("{file}: {m}"),
            SimError::Flag { .. } | SimError::Run(_) => self.to_string(),
        }
    }
}

/// Does the `--set` argument `set` (`SECTION.KEY=VALUE`) set `section.key`?
pub(super) fn set_names(set: &str, section: &str, key: &str) -> bool {
    set.split_once('=')
        .and_then(|(path, _)| path.trim().split_once('.'))
        .is_some_and(|(s, k)| s.trim() == section && k.trim() == key)
}
