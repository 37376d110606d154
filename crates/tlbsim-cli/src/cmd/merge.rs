//! `tlbsim merge`: joins the points that shards of one sweep kept (`sweep
//! --shard I/N --resume DIR`) into the CSV that the whole sweep would have
//! written, byte for byte.

use super::sweep::store::{self, Store};
use super::sweep::{table, Stop};
use crate::files::{check_outputs, write_atomic};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// How many missing or doubled points an error lists by name.
const LISTED: usize = 5;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directories of `sweep --resume` (one per shard, or one that shards
    /// shared), all of the same sweep.
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// Output CSV file, or standard output if "-" (as `sweep --csv`).
    #[arg(long)]
    csv: PathBuf,
    /// Also write the summary over seeds (as `sweep --summary`).
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
}

/// Writes the CSV (and summary) of the sweep whose points the directories
/// hold between them. Exit code 2, before writing anything: an output that
/// cannot be written, a directory that is not a sweep's, directories of
/// different sweeps (naming what differs), a point in more than one
/// directory or in none (with the count and the first few).
pub fn run(args: Args) -> ExitCode {
    match merge(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(stop) => stop.report(),
    }
}

/// [`run`], returning why it stopped.
fn merge(args: &Args) -> Result<(), Stop> {
    let stores = open_all(&args.dirs).map_err(Stop::usage)?;
    let m = stores[0].manifest();
    let inputs: Vec<(&str, PathBuf)> = stores
        .iter()
        .flat_map(|s| store::files(s.dir(), m.points.len()))
        .map(|p| ("a file of the sweep's directory", p))
        .collect();
    let outputs = [
        ("--csv", Some(args.csv.as_path())),
        ("--summary", args.summary.as_deref()),
    ];
    check_outputs(&inputs, &outputs).map_err(Stop::usage)?;
    let param = m.param.as_deref();
    let rows = collect(&stores).map_err(Stop::usage)?;
    let dirs = match stores.len() {
        1 => "1 directory".to_string(),
        n => format!("{n} directories"),
    };
    eprintln!("merge: {} points from {dirs}", rows.len());
    let bytes = table::csv_bytes(param, &rows).map_err(Stop::failure)?;
    write_atomic(&args.csv, &bytes).map_err(Stop::failure)?;
    if let Some(p) = &args.summary {
        let bytes =
            table::summary_bytes(param, &rows, m.runs_per_point()).map_err(Stop::failure)?;
        write_atomic(p, &bytes).map_err(Stop::failure)?;
    }
    Ok(())
}

/// Opens each directory (none given twice) and checks that they hold the
/// same sweep. `dirs` is not empty (clap requires one).
fn open_all(dirs: &[PathBuf]) -> Result<Vec<Store>, String> {
    let mut stores: Vec<Store> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for d in dirs {
        let s = Store::open(d)?;
        let real = d.canonicalize().unwrap_or_else(|_| d.clone());
        if seen.contains(&real) {
            return Err(format!("{}: given twice", d.display()));
        }
        seen.push(real);
        if let Some(first) = stores.first() {
            if let Some(diff) = first.manifest().difference(s.manifest()) {
                return Err(format!(
                    "{} and {} hold different sweeps: {diff}",
                    first.dir().display(),
                    d.display()
                ));
            }
        }
        stores.push(s);
    }
    if stores.is_empty() {
        return Err("no directory given".into());
    }
    Ok(stores)
}

/// Every point's row, in sweep order, each from the one directory that
/// holds it. The error lists the points no directory holds, or those that
/// more than one holds.
fn collect(stores: &[Store]) -> Result<Vec<table::Row>, String> {
    let m = stores[0].manifest();
    let width = table::width(m.param.as_deref());
    let mut rows = Vec::with_capacity(m.points.len());
    let mut missing = Vec::new();
    let mut doubled = Vec::new();
    for i in 0..m.points.len() {
        let mut found: Vec<(&Path, table::Row)> = Vec::new();
        for s in stores {
            if let Some(r) = s.load(i, width)? {
                found.push((s.dir(), r));
            }
        }
        match found.len() {
            0 => missing.push(i),
            1 => rows.extend(found.pop().map(|(_, r)| r)),
            _ => doubled.push((
                i,
                found
                    .iter()
                    .map(|(d, _)| d.display().to_string())
                    .collect::<Vec<_>>(),
            )),
        }
    }
    if !missing.is_empty() {
        let names = missing.iter().map(|&i| point_name(&m.points, i));
        return Err(format!(
            "{} of {} points are in none of the directories (a shard not run or not finished): {}",
            missing.len(),
            m.points.len(),
            first_few(names, missing.len())
        ));
    }
    if !doubled.is_empty() {
        let names = doubled
            .iter()
            .map(|(i, dirs)| format!("{} in {}", point_name(&m.points, *i), dirs.join(" and ")));
        return Err(format!(
            "{} points are in more than one directory (each must be in one): {}",
            doubled.len(),
            first_few(names, doubled.len())
        ));
    }
    Ok(rows)
}

/// Point `i` (0-based) as errors name it: `4 (ampere-32 4 CPUs ...)`.
fn point_name(points: &[String], i: usize) -> String {
    format!("{} ({})", i + 1, points.get(i).map_or("", String::as_str))
}

/// The first [`LISTED`] of `names` (of `count`), joined, and how many
/// more there are.
fn first_few(names: impl Iterator<Item = String>, count: usize) -> String {
    let shown: Vec<String> = names.take(LISTED).collect();
    let more = count.saturating_sub(shown.len());
    if more == 0 {
        shown.join(", ")
    } else {
        format!("{} and {more} more", shown.join(", "))
    }
}
