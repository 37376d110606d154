//! The points of a sweep: the arguments that define them, parsed; the
//! points in sweep order, each with a stable key; and the checks each
//! point passes before any run.

use crate::files::set_profile;
use std::path::Path;
use std::sync::Arc;
use tlbsim::config::{builtin_profile, is_profile_path, Experiment};
use tlbsim::kernel::registry::{check_combination, find_allocator, find_policy};
use tlbsim::sim::{resolve_profile, RunOptions, SimError};

/// Most points one sweep may have (all `--profiles` x `--cpus` x `--param`
/// values x `--policies` x `--seeds`), so that a typo such as `--seeds
/// 1..1000000000` is an error, not a sweep that fills memory.
pub const MAX_POINTS: usize = 1 << 20;

/// A swept workload parameter: its name and values.
pub type SweptParam = (String, Vec<toml::Value>);

/// `--shard I/N`: the points whose index modulo `count` is `index - 1`
/// (round-robin, so that each shard gets its share of the large CPU
/// counts, which sweep order puts together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// `I`, 1 to `count`.
    pub index: usize,
    /// `N`, at least 1.
    pub count: usize,
}

impl Shard {
    /// Does this shard run the point at `point` (0-based, sweep order)?
    pub fn holds(&self, point: usize) -> bool {
        point % self.count == self.index - 1
    }
}

/// The arguments that define the points, parsed.
#[derive(Debug)]
pub struct Plan {
    /// `--cpus` (`None`: the profile's own count).
    pub cpus: Vec<Option<u32>>,
    /// `--param`.
    pub param: Option<SweptParam>,
    /// `--seeds` in the order given; empty: each point runs once with the
    /// experiment's own seed.
    pub seeds: Vec<u64>,
    /// `--shard`.
    pub shard: Option<Shard>,
}

impl Plan {
    /// How many runs each configuration has (one per seed), consecutive
    /// in sweep order.
    pub fn runs_per_point(&self) -> usize {
        self.seeds.len().max(1)
    }
}

/// One point of the sweep: one run.
pub struct Job {
    /// Profile as given (built-in name or file).
    pub profile: String,
    /// CPU count (`None`: the profile's own).
    pub cpus: Option<u32>,
    /// TLB policy.
    pub policy: String,
    /// The swept parameter's name and value as the CSV cell shows it.
    pub param: Option<(String, String)>,
    /// Root seed of the run.
    pub seed: u64,
    /// The experiment the run runs (shared by the runs of every seed).
    pub exp: Arc<Experiment>,
}

impl Job {
    /// The error `e` of this point's run, after its label and located
    /// where the value at fault came from: `--param` when the point's
    /// swept parameter is the field at fault, a `--set` argument of
    /// `sets`, or a line of the experiment `file` (whose text is `text`).
    pub fn error(&self, e: &SimError, (file, text): (&str, &str), sets: &[String]) -> String {
        let swept = match (&self.param, e) {
            (
                Some((name, v)),
                SimError::Field {
                    section,
                    key,
                    message,
                },
            ) if *name == format!("{section}.{key}") || (section == "workload" && name == key) => {
                Some(format!("--param {name}={v}: [{section}] {key}: {message}"))
            }
            _ => None,
        };
        let why = swept.unwrap_or_else(|| e.located_with_sets(file, text, sets));
        format!("{}: {why}", self.label())
    }

    /// How progress and errors name the point, and the key that tells one
    /// point from another in a resume directory: profile, CPU count,
    /// parameter value, policy and seed.
    pub fn label(&self) -> String {
        let cpus = self.cpus.map_or("profile".to_string(), |n| n.to_string());
        let param = match &self.param {
            Some((name, v)) => format!(" {name}={v}"),
            None => String::new(),
        };
        format!(
            "{} {cpus} CPUs{param} {} seed {}",
            self.profile, self.policy, self.seed
        )
    }

    /// The options the point runs with.
    pub fn options(&self) -> RunOptions {
        RunOptions {
            seed: Some(self.seed),
            cpus: self.cpus,
        }
    }
}

/// Parses the arguments that define the points (`--cpus`, `--param`,
/// `--seeds`, `--shard`). The error names the flag; the first bad flag in
/// that order is reported.
pub fn parse_plan(
    cpus: &[String],
    param: Option<&str>,
    seeds: Option<&str>,
    shard: Option<&str>,
) -> Result<Plan, String> {
    let cpus = cpus
        .iter()
        .map(|c| match c.as_str() {
            "profile" => Ok(None),
            n => n
                .parse::<u32>()
                .map(Some)
                .map_err(|_| format!("--cpus: \"{n}\" is not a CPU count or \"profile\"")),
        })
        .collect::<Result<Vec<_>, String>>()?;
    let param = param.map(parse_param).transpose()?;
    let seeds = seeds.map(parse_seeds).transpose()?.unwrap_or_default();
    if !seeds.is_empty() && param.as_ref().is_some_and(|(n, _)| n == "experiment.seed") {
        return Err("--seeds: --param experiment.seed sets the seed too; give one of them".into());
    }
    let shard = shard.map(parse_shard).transpose()?;
    Ok(Plan {
        cpus,
        param,
        seeds,
        shard,
    })
}

/// Parses `--seeds A..B` (inclusive, `A <= B`) or `--seeds S1,S2,...` (no
/// seed twice).
pub fn parse_seeds(s: &str) -> Result<Vec<u64>, String> {
    let bad = || format!("--seeds: \"{s}\" is not A..B or a comma-separated list of seeds");
    let seed = |t: &str| t.trim().parse::<u64>().map_err(|_| bad());
    if let Some((a, b)) = s.split_once("..") {
        let (a, b) = (seed(a)?, seed(b)?);
        if a > b {
            return Err(format!("--seeds {s}: the range is empty ({a} > {b})"));
        }
        let n = b - a;
        if n >= MAX_POINTS as u64 {
            return Err(format!(
                "--seeds {s}: {} seeds (at most {MAX_POINTS})",
                u128::from(n) + 1
            ));
        }
        return Ok((a..=b).collect());
    }
    let mut seeds = Vec::new();
    for t in s.split(',') {
        let v = seed(t)?;
        if seeds.contains(&v) {
            return Err(format!("--seeds {s}: seed {v} is given twice"));
        }
        seeds.push(v);
    }
    Ok(seeds)
}

/// Parses `--shard I/N` (`1 <= I <= N`).
pub fn parse_shard(s: &str) -> Result<Shard, String> {
    let bad = || format!("--shard: \"{s}\" is not I/N (shard I of N, 1 <= I <= N)");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let index: usize = i.trim().parse().map_err(|_| bad())?;
    let count: usize = n.trim().parse().map_err(|_| bad())?;
    if count == 0 || index == 0 || index > count {
        return Err(format!(
            "--shard {s}: shard {index} of {count} does not exist (1 <= I <= N)"
        ));
    }
    Ok(Shard { index, count })
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
/// then parameter values, then policies, then seeds (so the runs of one
/// configuration are consecutive). At most [`MAX_POINTS`]. The error names
/// the flag (`--profiles` for a profile file that does not load, `--param`
/// for a key that does not take the value).
pub fn build_jobs(
    exp0: &Experiment,
    profiles: &[String],
    policies: &[String],
    plan: &Plan,
) -> Result<Vec<Job>, String> {
    let values: Vec<Option<&toml::Value>> = match &plan.param {
        Some((_, v)) => v.iter().map(Some).collect(),
        None => vec![None],
    };
    let count = [profiles.len(), plan.cpus.len(), values.len(), policies.len()]
        .iter()
        .try_fold(plan.runs_per_point(), |a, &b| a.checked_mul(b))
        .filter(|&n| n <= MAX_POINTS)
        .ok_or_else(|| {
            format!("sweep has too many points (at most {MAX_POINTS}: --profiles x --cpus x --param x --policies x --seeds)")
        })?;
    let mut jobs = Vec::with_capacity(count);
    for prof in profiles {
        for &cpus in &plan.cpus {
            for value in &values {
                for pol in policies {
                    let (exp, param) = configure(exp0, prof, pol, plan.param.as_ref(), *value)?;
                    let exp = Arc::new(exp);
                    let seeds = match plan.seeds.as_slice() {
                        [] => vec![exp.experiment.seed],
                        s => s.to_vec(),
                    };
                    for seed in seeds {
                        jobs.push(Job {
                            profile: prof.clone(),
                            cpus,
                            policy: pol.clone(),
                            param: param.clone(),
                            seed,
                            exp: Arc::clone(&exp),
                        });
                    }
                }
            }
        }
    }
    Ok(jobs)
}

/// `exp0` on profile `prof` with policy `pol` and the swept parameter at
/// `value`; with the parameter's name and CSV cell.
fn configure(
    exp0: &Experiment,
    prof: &str,
    pol: &str,
    param: Option<&SweptParam>,
    value: Option<&toml::Value>,
) -> Result<(Experiment, Option<(String, String)>), String> {
    let mut exp = exp0.clone();
    // A --profiles file is relative to the working directory.
    set_profile(&mut exp, prof, Path::new("")).map_err(|e| format!("--profiles {prof}: {e}"))?;
    exp.kernel.tlb_policy = pol.to_string();
    let (Some((name, _)), Some(v)) = (param, value) else {
        return Ok((exp, None));
    };
    match name.split_once('.') {
        None => {
            exp.workload.params.insert(name.clone(), v.clone());
        }
        Some((section, key)) => {
            exp = set_key(&exp, section, key, v).map_err(|e| format!("--param {name}: {e}"))?;
        }
    }
    let cell = v.to_string().trim_matches('"').to_string();
    Ok((exp, Some((name.clone(), cell))))
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
///
/// A point whose workload is estimated past `max_events` (0: no bound) is
/// refused as `tlbsim run --max-events` refuses it; the note of the
/// largest point estimated past [`crate::bounds::WARN_EVENTS`], if any, is
/// returned for the sweep to print.
pub fn check_jobs(
    jobs: &[Job],
    (file, text): (&str, &str),
    sets: &[String],
    max_events: u64,
) -> Result<Option<String>, String> {
    // The runs of one configuration (its seeds) share its experiment.
    let mut last: Option<&Arc<Experiment>> = None;
    let mut largest: Option<(u64, String)> = None;
    for job in jobs {
        if last.is_some_and(|e| Arc::ptr_eq(e, &job.exp)) {
            continue;
        }
        last = Some(&job.exp);
        let located = |e: SimError| job.error(&e, (file, text), sets);
        let estimate = check_job(job).map_err(located)?;
        let Some(f) = &estimate.events else {
            continue;
        };
        if let Some(note) = crate::bounds::check(f, max_events).map_err(located)? {
            if largest.as_ref().is_none_or(|(v, _)| f.value > *v) {
                largest = Some((f.value, format!("{note} (point {})", job.label())));
            }
        }
    }
    Ok(largest.map(|(_, note)| note))
}

/// The checks of a point that need no simulated machine, each one that
/// `tlbsim::sim::run` makes before it simulates: the profile with the
/// point's CPU count, the policy and allocator on it, and the workload's
/// parameters (on the profile, or a guest's with `[vm]`). A point that
/// passes may still fail in the run's other checks. Its workload's
/// estimate.
fn check_job(job: &Job) -> Result<tlbsim::workload::Estimate, SimError> {
    let exp = &job.exp;
    let profile = resolve_profile(exp, &job.options())?;
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
    Ok(tlbsim::sim::workload_of(exp, &profile)?.1)
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
    out.workload.files = exp.workload.files.clone();
    crate::files::read_workload_files(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{parse_seeds, parse_shard, Shard};

    #[test]
    fn seeds_are_a_range_or_a_list() {
        assert_eq!(parse_seeds("3..5"), Ok(vec![3, 4, 5]));
        assert_eq!(parse_seeds("7"), Ok(vec![7]));
        assert_eq!(parse_seeds("9, 2"), Ok(vec![9, 2]));
        assert_eq!(
            parse_seeds(&format!("0..{}", u64::MAX)),
            Err(format!(
                "--seeds 0..{}: 18446744073709551616 seeds (at most 1048576)",
                u64::MAX
            ))
        );
        assert!(parse_seeds("..").is_err());
        assert!(parse_seeds("").is_err());
    }

    #[test]
    fn shards_deal_the_points_round_robin() {
        assert_eq!(parse_shard("2/3"), Ok(Shard { index: 2, count: 3 }));
        for bad in ["0/3", "4/3", "1/0", "1", "a/b", "1/2/3", "-1/2"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
        let s = Shard { index: 2, count: 3 };
        let mine: Vec<usize> = (0..9).filter(|&i| s.holds(i)).collect();
        assert_eq!(mine, [1, 4, 7]);
        // Every point in exactly one shard.
        for i in 0..20 {
            let n = (1..=3)
                .filter(|&k| Shard { index: k, count: 3 }.holds(i))
                .count();
            assert_eq!(n, 1);
        }
    }
}
