//! `tlbsim plot`: a line chart of two columns of a CSV (as `tlbsim sweep`
//! writes, or any CSV with a header line), one line per group, as SVG.

mod data;

use super::sweep::Stop;
use crate::chart::{
    axis_range, line_chart_svg, LineChart, Series, AXIS_MAX, LOG_AXIS_DECADES, LOG_AXIS_MIN,
};
use crate::files::{check_outputs, is_stdout, write_atomic};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Most lines a chart draws: more would not fit its legend.
const MAX_SERIES: usize = 40;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The CSV file: a header line naming the columns, then one row per
    /// point (as `tlbsim sweep --csv` writes; older sweeps' CSVs too).
    csv: PathBuf,
    /// The column of the x axis (numbers).
    #[arg(long, value_name = "COL")]
    x: String,
    /// The column of the y axis (numbers).
    #[arg(long, value_name = "COL")]
    y: String,
    /// One line per distinct value of these columns (comma-separated),
    /// in the order they first appear; without it, one line.
    #[arg(long, value_delimiter = ',', value_name = "COL[,COL...]")]
    group: Vec<String>,
    /// A logarithmic x axis (every x must be positive).
    #[arg(long)]
    log_x: bool,
    /// A logarithmic y axis (every y must be positive).
    #[arg(long)]
    log_y: bool,
    /// The chart's title [default: "FILE: Y by X"].
    #[arg(long)]
    title: Option<String>,
    /// Only rows whose column COL is exactly VALUE; repeat it to keep the
    /// rows that match every one.
    #[arg(long = "filter", value_name = "COL=VALUE", value_parser = parse_filter)]
    filters: Vec<(String, String)>,
    /// The output file: SVG, named *.svg, or standard output if "-".
    /// (No PNG: this build has no font for a bitmap; convert the SVG, e.g.
    /// `rsvg-convert -o fig.png fig.svg`.) Written whole or not at all.
    #[arg(long, value_name = "FILE.svg")]
    out: PathBuf,
}

/// `COL=VALUE` of `--filter`.
fn parse_filter(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((c, v)) if !c.is_empty() => Ok((c.to_string(), v.to_string())),
        _ => Err(format!("{s:?}: expected COL=VALUE")),
    }
}

/// Draws the chart and writes it. Exit code 2, with nothing written: an
/// output that is not `*.svg` or `-`, or that cannot be written; a CSV
/// that cannot be read, lacks a column, or has a cell that is not a
/// number (the error names file, line and column); more than
/// [`MAX_SERIES`] lines. Exit code 1: the write failed.
pub fn run(args: Args) -> ExitCode {
    match plot(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(stop) => stop.report(),
    }
}

/// [`run`], returning why it stopped.
fn plot(args: &Args) -> Result<(), Stop> {
    check_format(&args.out).map_err(Stop::usage)?;
    let inputs = [("the CSV", args.csv.clone())];
    check_outputs(&inputs, &[("--out", Some(args.out.as_path()))]).map_err(Stop::usage)?;
    let q = data::Query {
        x: &args.x,
        y: &args.y,
        group: &args.group,
        filters: &args.filters,
        log_x: args.log_x,
        log_y: args.log_y,
    };
    let series = data::read_series(&args.csv, &q).map_err(Stop::usage)?;
    if series.len() > MAX_SERIES {
        return Err(Stop::usage(format!(
            "{}: {} lines (groups of --group {}), more than the {MAX_SERIES} a legend shows; keep fewer with --filter",
            args.csv.display(),
            series.len(),
            args.group.join(",")
        )));
    }
    check_axes(args, &series).map_err(Stop::usage)?;
    let chart = LineChart {
        title: args.title.clone().unwrap_or_else(|| default_title(args)),
        x_label: args.x.clone(),
        y_label: args.y.clone(),
        log_x: args.log_x,
        log_y: args.log_y,
        series,
    };
    let svg = line_chart_svg(&chart).map_err(Stop::failure)?;
    write_atomic(&args.out, svg.as_bytes()).map_err(Stop::failure)
}

/// Each axis' values must fit an axis: magnitudes up to [`AXIS_MAX`], and
/// on a logarithmic one from [`LOG_AXIS_MIN`] and over at most
/// [`LOG_AXIS_DECADES`] (the CSV's cells are finite, and positive on a
/// logarithmic axis, already).
fn check_axes(args: &Args, series: &[Series]) -> Result<(), String> {
    let points = || series.iter().flat_map(|s| s.points.iter());
    let axes = [
        (
            "--x",
            &args.x,
            axis_range(points().map(|p| p.0), args.log_x),
        ),
        (
            "--y",
            &args.y,
            axis_range(points().map(|p| p.1), args.log_y),
        ),
    ];
    match axes.into_iter().find(|a| a.2.is_none()) {
        Some((flag, col, _)) => Err(format!(
            "{}: column {col} ({flag}): its values do not fit an axis (magnitudes up to {AXIS_MAX:e}; on a logarithmic axis, from {LOG_AXIS_MIN:e} and over at most {LOG_AXIS_DECADES} decades)",
            args.csv.display()
        )),
        None => Ok(()),
    }
}

/// `FILE: Y by X`, with the CSV's file name only (not its directory), so
/// that the figure does not depend on where it was drawn from.
fn default_title(args: &Args) -> String {
    let name = args
        .csv
        .file_name()
        .map_or_else(String::new, |n| format!("{}: ", n.to_string_lossy()));
    format!("{name}{} by {}", args.y, args.x)
}

/// The output must be SVG: `-`, or a name ending in `.svg` (any case).
fn check_format(out: &Path) -> Result<(), String> {
    if is_stdout(out) {
        return Ok(());
    }
    let ext = out
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("svg") => Ok(()),
        Some("png") => Err(format!(
            "--out {}: PNG is not supported (this build draws SVG only: it has no font for a bitmap); write a .svg and convert it, e.g. rsvg-convert -o fig.png fig.svg",
            out.display()
        )),
        _ => Err(format!(
            "--out {}: the file name must end in .svg (tlbsim plot writes SVG)",
            out.display()
        )),
    }
}
