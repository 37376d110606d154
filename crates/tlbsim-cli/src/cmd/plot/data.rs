//! Reading a CSV into the series of a line chart: columns found by name
//! in the header line, rows kept by `--filter`, one series per distinct
//! value of the group columns in the order they first appear, points
//! sorted by x. Every error names the file, and a cell's error its line
//! and column.

use crate::chart::Series;
use crate::files::why;
use csv::StringRecord;
use std::collections::BTreeMap;
use std::path::Path;

/// What to take from the CSV.
#[derive(Debug)]
pub struct Query<'a> {
    /// The x column.
    pub x: &'a str,
    /// The y column.
    pub y: &'a str,
    /// The group columns (empty: one series, labelled with `y`).
    pub group: &'a [String],
    /// `(column, value)`: only rows whose cell is exactly `value`.
    pub filters: &'a [(String, String)],
    /// x must be positive (a logarithmic axis).
    pub log_x: bool,
    /// y must be positive (a logarithmic axis).
    pub log_y: bool,
}

/// The header's indices of the query's columns.
struct Cols {
    x: usize,
    y: usize,
    group: Vec<usize>,
    filters: Vec<(usize, String)>,
}

/// The series being built: their group values' index, and the series in
/// first-appearance order.
#[derive(Default)]
struct Groups {
    index: BTreeMap<Vec<String>, usize>,
    series: Vec<Series>,
}

/// The series of `path` that `q` asks for, in first-appearance order of
/// their group values, each sorted by x (stably: rows with equal x keep
/// their order). Errors: the file cannot be read, is empty or not CSV;
/// a column is missing (the error lists the header's columns); a row has
/// more or fewer cells than the header; an x or y cell is not a finite
/// number, or not positive on a logarithmic axis; no row is left (none at
/// all, or none that the filters keep).
pub fn read_series(path: &Path, q: &Query) -> Result<Vec<Series>, String> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("{file}: cannot read: {}", why(&e)))?;
    let mut rd = csv::ReaderBuilder::new().from_reader(bytes.as_slice());
    let header = rd.headers().map_err(|e| csv_err(&file, &e))?.clone();
    if header.iter().all(str::is_empty) {
        return Err(format!("{file}: empty: no header line"));
    }
    let cols = columns(&file, &header, q)?;
    let mut groups = Groups::default();
    let mut rows = 0usize;
    for rec in rd.records() {
        let rec = rec.map_err(|e| csv_err(&file, &e))?;
        rows += 1;
        let line = rec.position().map_or(0, |p| p.line());
        let at = |i: usize| rec.get(i).unwrap_or_default();
        if cols.filters.iter().any(|(i, v)| at(*i) != v) {
            continue;
        }
        let cell = |i: usize, name: &str, flag: &str, log: Option<&str>| {
            number(at(i), log).map_err(|m| format!("{file}:{line}: column {name} ({flag}): {m}"))
        };
        let x = cell(cols.x, q.x, "--x", q.log_x.then_some("--log-x"))?;
        let y = cell(cols.y, q.y, "--y", q.log_y.then_some("--log-y"))?;
        let key: Vec<String> = cols.group.iter().map(|&i| at(i).to_string()).collect();
        groups.push(key, q.y, (x, y));
    }
    if groups.series.is_empty() {
        return Err(no_rows(&file, rows, q.filters));
    }
    for s in &mut groups.series {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Ok(groups.series)
}

impl Groups {
    /// Adds `point` to the series of the group values `key`: a new series
    /// after the others if `key` is new, labelled with its values (`y`
    /// when there are no group columns).
    fn push(&mut self, key: Vec<String>, y: &str, point: (f64, f64)) {
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let label = if key.is_empty() {
                    y.to_string()
                } else {
                    let shown: Vec<&str> = key
                        .iter()
                        .map(|v| if v.is_empty() { "(empty)" } else { v.as_str() })
                        .collect();
                    shown.join(", ")
                };
                self.series.push(Series {
                    label,
                    points: Vec::new(),
                });
                self.index.insert(key, self.series.len() - 1);
                self.series.len() - 1
            }
        };
        self.series[i].points.push(point);
    }
}

/// The header indices of the query's columns. A missing one is an error
/// naming it, its flag and the file, and listing the header's columns.
fn columns(file: &str, header: &StringRecord, q: &Query) -> Result<Cols, String> {
    let find = |name: &str, flag: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| {
            let all: Vec<&str> = header.iter().collect();
            format!(
                "{file}:1: no column {name:?} ({flag}); the columns are: {}",
                all.join(", ")
            )
        })
    };
    let group = q.group.iter().map(|g| find(g, "--group"));
    let filters = q
        .filters
        .iter()
        .map(|(c, v)| Ok((find(c, "--filter")?, v.clone())));
    Ok(Cols {
        x: find(q.x, "--x")?,
        y: find(q.y, "--y")?,
        group: group.collect::<Result<_, _>>()?,
        filters: filters.collect::<Result<_, String>>()?,
    })
}

/// The cell `s` as a number: finite, and positive if on a logarithmic
/// axis (`log`: the flag that asked for it). The error says what is wrong
/// with it.
fn number(s: &str, log: Option<&str>) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if !v.is_finite() {
        return Err(format!("{s:?} is not a finite number"));
    }
    match log {
        Some(flag) if v <= 0.0 => Err(format!(
            "{s} is not positive, so it cannot be drawn on a logarithmic axis ({flag})"
        )),
        _ => Ok(v),
    }
}

/// A CSV reading error as one line naming the file and line.
fn csv_err(file: &str, e: &csv::Error) -> String {
    let line = e
        .position()
        .map_or(String::new(), |p| format!(":{}", p.line()));
    match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("{file}{line}: {len} cells, but the header has {expected_len}"),
        csv::ErrorKind::Utf8 { .. } => format!("{file}{line}: not UTF-8 text"),
        csv::ErrorKind::Io(io) => format!("{file}: cannot read: {}", why(io)),
        _ => format!("{file}{line}: {e}"),
    }
}

/// Why no series was made from `rows` data rows.
fn no_rows(file: &str, rows: usize, filters: &[(String, String)]) -> String {
    if rows == 0 {
        return format!("{file}: no data rows (only the header line)");
    }
    let f: Vec<String> = filters.iter().map(|(c, v)| format!("{c}={v}")).collect();
    format!(
        "{file}: none of its {rows} rows matches --filter {}",
        f.join(" --filter ")
    )
}

#[cfg(test)]
mod tests {
    use super::{read_series, Query};
    use crate::chart::Series;

    /// `text` in a new file whose name ends with `name`, removed when
    /// dropped.
    fn csv(name: &str, text: &str) -> tempfile::TempPath {
        let f = tempfile::Builder::new()
            .prefix("tlbsim-plot-")
            .suffix(name)
            .tempfile()
            .unwrap();
        std::fs::write(f.path(), text).unwrap();
        f.into_temp_path()
    }

    fn query<'a>(group: &'a [String], filters: &'a [(String, String)]) -> Query<'a> {
        Query {
            x: "n",
            y: "t",
            group,
            filters,
            log_x: false,
            log_y: true,
        }
    }

    #[test]
    fn series_follow_first_appearance_and_points_are_sorted_by_x() {
        let p = csv(
            "groups.csv",
            "p,n,t,m\nb,4,1.5,x\na,2,1,x\nb,2,0.5,y\na,1,2,x\n",
        );
        let group = ["p".to_string()];
        let s = read_series(&p, &query(&group, &[])).unwrap();
        let want = |label: &str, points: &[(f64, f64)]| Series {
            label: label.into(),
            points: points.to_vec(),
        };
        assert_eq!(
            s,
            [
                want("b", &[(2.0, 0.5), (4.0, 1.5)]),
                want("a", &[(1.0, 2.0), (2.0, 1.0)])
            ]
        );
        let only_x = [("m".to_string(), "x".to_string())];
        let s = read_series(&p, &query(&[], &only_x)).unwrap();
        assert_eq!(s, [want("t", &[(1.0, 2.0), (2.0, 1.0), (4.0, 1.5)])]);
        let e = read_series(&p, &query(&group, &[("m".into(), "z".into())])).unwrap_err();
        assert!(
            e.ends_with("groups.csv: none of its 4 rows matches --filter m=z"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_cell_names_file_line_and_column() {
        let p = csv("bad.csv", "n,t\n1,2\n2,0\n");
        let e = read_series(&p, &query(&[], &[])).unwrap_err();
        assert!(
            e.ends_with("bad.csv:3: column t (--y): 0 is not positive, so it cannot be drawn on a logarithmic axis (--log-y)"),
            "{e}"
        );
        let p = csv("nan.csv", "n,t\n1,NaN\n");
        let e = read_series(&p, &query(&[], &[])).unwrap_err();
        assert!(
            e.ends_with("nan.csv:2: column t (--y): \"NaN\" is not a finite number"),
            "{e}"
        );
    }
}
