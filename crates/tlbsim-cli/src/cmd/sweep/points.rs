//! The points of a sweep: the arguments that define them, parsed; the
//! points in sweep order; and the checks each point passes before any run.

use crate::files::set_profile;
use std::path::Path;
use std::process::ExitCode;
use tlbsim::config::{builtin_profile, is_profile_path, Experiment};
use tlbsim::kernel::registry::{check_combination, find_allocator, find_policy};
use tlbsim::sim::{resolve_profile, RunOptions, SimError};

use super::Args;

/// A swept workload parameter: its name and values.
pub type SweptParam = (String, Vec<toml::Value>);

/// One point of the sweep.
pub struct Job {
    /// Profile as given (built-in name or file).
    pub profile: String,
    /// CPU count (`None`: the profile's own).
    pub cpus: Option<u32>,
    pub policy: String,
    /// The swept parameter's CSV cell with its comma, or empty.
    pub param_cell: String,
    pub exp: Experiment,
}

impl Job {
    /// How progress and errors name the point.
    pub fn label(&self) -> String {
        format!(
            "{} {} CPUs {} {}",
            self.profile,
            self.cpus.map_or("profile".to_string(), |n| n.to_string()),
            self.policy,
            self.param_cell.trim_end_matches(',')
        )
        .trim_end()
        .to_string()
    }
}

/// `--cpus` and `--param` parsed.
pub fn parse_cpus_and_param(args: &Args) -> Result<(Vec<Option<u32>>, Option<SweptParam>), String> {
    let cpus = args
        .cpus
        .iter()
        .map(|c| match c.as_str() {
            "profile" => Ok(None),
            n => n
                .parse::<u32>()
                .map(Some)
                .map_err(|_| format!("--cpus: \"{n}\" is not a CPU count or \"profile\"")),
        })
        .collect::<Result<Vec<_>, String>>();
    let param = args.param.as_deref().map(parse_param).transpose();
    // The --cpus error first, as both are reported together.
    Ok((cpus?, param?))
}

/// Parses `--param NAME=V1,V2,...`; each value is TOML (a bare word that
/// is not valid TOML is taken as a string).
fn parse_param(s: &str) -> Result<SweptParam, String> {
    let (name, vals) = s
        .split_once('=')
        .ok_or_else(|| format!("--param: \"{s}\" is not NAME=V1,V2,..."))?;
    let name = name.trim();
    if name.is_empty() || vals.trim().is_empty() {
        return Err(format!("--param: \"{s}\" is not NAME=V1,V2,..."));
    }
    let values = vals
        .split(',')
        .map(|v| {
            let v = v.trim();
            toml::from_str::<toml::Table>(&format!("x = {v}"))
                .ok()
                .and_then(|t| t.get("x").cloned())
                .unwrap_or_else(|| toml::Value::String(v.to_string()))
        })
        .collect();
    Ok((name.to_string(), values))
}

/// Every point of the sweep, in CSV order: profiles, then CPU counts,
/// then parameter values, then policies. Exit code 2 on a bad profile.
pub fn build_jobs(
    exp0: &Experiment,
    profiles: &[String],
    cpus: &[Option<u32>],
    param: Option<&SweptParam>,
    policies: &[String],
) -> Result<Vec<Job>, ExitCode> {
    let values: Vec<Option<&toml::Value>> = match param {
        Some((_, v)) => v.iter().map(Some).collect(),
        None => vec![None],
    };
    let mut jobs = Vec::new();
    for prof in profiles {
        for &n in cpus {
            for value in &values {
                for pol in policies {
                    let mut exp = exp0.clone();
                    // A --profiles file is relative to the working directory.
                    if let Err(e) = set_profile(&mut exp, prof, Path::new("")) {
                        eprintln!("error: --profiles {prof}: {e}");
                        return Err(ExitCode::from(2));
                    }
                    exp.kernel.tlb_policy = pol.clone();
                    let mut param_cell = String::new();
                    if let (Some((name, _)), Some(v)) = (param, value) {
                        match name.split_once('.') {
                            None => {
                                exp.workload.params.insert(name.clone(), (*v).clone());
                            }
                            Some((section, key)) => {
                                exp = match set_key(&exp, section, key, v) {
                                    Ok(e) => e,
                                    Err(e) => {
                                        eprintln!("error: --param {name}: {e}");
                                        return Err(ExitCode::from(2));
                                    }
                                }
                            }
                        }
                        param_cell = format!("{},", v.to_string().trim_matches('"'));
                    }
                    jobs.push(Job {
                        profile: prof.clone(),
                        cpus: n,
                        policy: pol.clone(),
                        param_cell,
                        exp,
                    });
                }
            }
        }
    }
    Ok(jobs)
}

/// Checks every `--policies` name against the registry and every built-in
/// `--profiles` name (profile files are read by [`build_jobs`], also before
/// any run). The error names the flag and the value, and lists the known
/// names.
pub fn check_names(policies: &[String], profiles: &[String]) -> Result<(), String> {
    for p in policies {
        find_policy(p).map_err(|e| format!("--policies {p}: {e}"))?;
    }
    for p in profiles.iter().filter(|p| !is_profile_path(p)) {
        builtin_profile(p).map_err(|e| format!("--profiles {p}: {}", e.message))?;
    }
    Ok(())
}

/// Checks each point as a run checks it before simulating (see
/// [`check_job`]), so that a bad point stops the sweep before the first
/// run rather than after the others ran. The error is the point's label
/// and the run's error, located in `file` (whose text is `text`).
pub fn check_jobs(jobs: &[Job], file: &str, text: &str) -> Result<(), String> {
    for job in jobs {
        check_job(job).map_err(|e| format!("{}: {}", job.label(), e.located(file, text)))?;
    }
    Ok(())
}

/// The checks of a point that need no simulated machine, each one that
/// `tlbsim::sim::run` makes before it simulates: the profile with the
/// point's CPU count, the policy and allocator on it, and the workload's
/// parameters (on the profile, for a run without VMs). A point that passes
/// may still fail in the run's other checks.
fn check_job(job: &Job) -> Result<(), SimError> {
    let exp = &job.exp;
    let opts = RunOptions {
        seed: None,
        cpus: job.cpus,
    };
    let profile = resolve_profile(exp, &opts)?;
    let field = |section: &str, key: &str, message: String| SimError::Field {
        section: section.into(),
        key: key.into(),
        message,
    };
    let k = &exp.kernel;
    let policy = find_policy(&k.tlb_policy).map_err(|e| field("kernel", "tlb_policy", e))?;
    let alloc =
        find_allocator(&k.asid_allocator).map_err(|e| field("kernel", "asid_allocator", e))?;
    check_combination(policy, alloc, &profile).map_err(|(key, m)| field("kernel", key, m))?;
    let wl = tlbsim::workload::build(&exp.workload.name, &exp.workload.params)
        .map_err(|e| SimError::Config(format!("[workload] {e}")))?;
    if exp.vm.is_none() {
        wl.workload
            .check(&profile)
            .map_err(|e| SimError::Config(format!("[workload] {e}")))?;
    }
    Ok(())
}

/// `exp` with `[section] key = v` (a `--param SECTION.KEY=...` value, as
/// `--set` would give it).
fn set_key(
    exp: &Experiment,
    section: &str,
    key: &str,
    v: &toml::Value,
) -> Result<Experiment, String> {
    let mut t = toml::Table::try_from(exp).map_err(|e| e.to_string())?;
    let s = t
        .entry(section.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let toml::Value::Table(s) = s else {
        return Err(format!("[{section}] is not a table"));
    };
    s.insert(key.to_string(), v.clone());
    let mut out: Experiment = toml::Value::Table(t)
        .try_into()
        .map_err(|e: toml::de::Error| e.message().to_string())?;
    out.profile_data = exp.profile_data.clone();
    Ok(out)
}
