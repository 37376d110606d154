//! A sweep's directory of finished points (`sweep --resume DIR`, one per
//! shard or shared by all, read by `tlbsim merge`):
//!
//! - `manifest.json`: what defines the points (see [`Manifest`]), written
//!   before the first point; a sweep whose manifest differs is refused.
//! - `point-NNNNNN.json`: one finished point (its number in sweep order,
//!   from 1; its key; its CSV row), written whole or not at all: a temporary file,
//!   flushed to disk, renamed. A process killed while writing one leaves
//!   at most a hidden temporary file (`.point-...tmp...`), which is never
//!   read; the point is run again.

use super::table::Row;
use crate::files::{check_output, why, write_atomic};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// The layout of the directory and its files; a directory in another
/// layout is refused.
pub const FORMAT: &str = "tlbsim-sweep/1";

/// The manifest's file name in the directory.
const MANIFEST: &str = "manifest.json";

/// What defines a sweep's points and results: two sweeps with equal
/// manifests have the same points with the same results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    /// tlbsim's version.
    pub version: String,
    /// The experiment file's text.
    pub experiment: String,
    /// `--set` arguments, in order.
    pub sets: Vec<String>,
    /// The swept parameter's name (`--param`), which names a CSV column.
    pub param: Option<String>,
    /// `--seeds` in the order given; empty when not given.
    pub seeds: Vec<u64>,
    /// Each point's key (see `Job::label`), in sweep order.
    pub points: Vec<String>,
    /// Each `--profiles` file: its name as given and its text.
    pub profile_files: Vec<(String, String)>,
}

impl Manifest {
    /// A short fingerprint of the manifest (64-bit FNV-1a of its JSON, in
    /// hex), which each point file carries.
    pub fn id(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in json.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    /// How many runs each configuration has (one per seed).
    pub fn runs_per_point(&self) -> usize {
        self.seeds.len().max(1)
    }

    /// What differs between this manifest (`there`) and `now`, in words,
    /// the first difference found; `None` if they are equal.
    pub fn difference(&self, now: &Manifest) -> Option<String> {
        let list = |v: &[String]| match v {
            [] => "(none)".to_string(),
            _ => format!("[{}]", v.join(" ")),
        };
        let seeds = |v: &[u64]| match v {
            [] => "(none)".to_string(),
            _ => format!("{v:?}").replace(' ', ""),
        };
        if self.format != now.format {
            Some(format!(
                "it is in format {:?}, this tlbsim reads {:?}",
                self.format, now.format
            ))
        } else if self.version != now.version {
            Some(format!(
                "tlbsim version {} there, {} now",
                self.version, now.version
            ))
        } else if self.experiment != now.experiment {
            Some("the experiment file's text differs".into())
        } else if self.sets != now.sets {
            Some(format!(
                "--set {} there, {} now",
                list(&self.sets),
                list(&now.sets)
            ))
        } else if self.param != now.param {
            let p = |p: &Option<String>| p.clone().unwrap_or_else(|| "(none)".into());
            Some(format!(
                "--param {} there, {} now",
                p(&self.param),
                p(&now.param)
            ))
        } else if self.seeds != now.seeds {
            Some(format!(
                "--seeds {} there, {} now",
                seeds(&self.seeds),
                seeds(&now.seeds)
            ))
        } else if self.points != now.points {
            Some(points_difference(&self.points, &now.points))
        } else if self.profile_files != now.profile_files {
            let name = self
                .profile_files
                .iter()
                .zip(&now.profile_files)
                .find(|(a, b)| a != b)
                .map_or("a --profiles file", |(a, _)| a.0.as_str());
            Some(format!("the text of profile file {name} differs"))
        } else {
            None
        }
    }
}

/// The first difference between the point lists `there` and `now`.
fn points_difference(there: &[String], now: &[String]) -> String {
    let i = there.iter().zip(now).take_while(|(a, b)| a == b).count();
    let at = |v: &[String]| v.get(i).map_or("none".to_string(), |k| format!("\"{k}\""));
    format!(
        "the points differ (--profiles, --cpus, --param, --policies): {} there, {} now; point {}: {} there, {} now",
        there.len(),
        now.len(),
        i + 1,
        at(there),
        at(now)
    )
}

/// The files of a sweep of `points` points kept in `dir`: the manifest
/// and each point's file (whether or not they exist yet).
pub fn files(dir: &Path, points: usize) -> impl Iterator<Item = PathBuf> + '_ {
    std::iter::once(dir.join(MANIFEST)).chain((0..points).map(|i| point_path(dir, i)))
}

/// The file of point `index` (0-based) in `dir`, named by its number
/// (1-based).
fn point_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("point-{:06}.json", index + 1))
}

/// One finished point's file.
#[derive(Debug, Serialize, Deserialize)]
struct PointFile {
    /// [`FORMAT`].
    format: String,
    /// The manifest's [`Manifest::id`].
    sweep: String,
    /// The point's index in sweep order (0-based).
    index: usize,
    /// The point's key.
    key: String,
    /// Its CSV row.
    row: Row,
}

/// A sweep's directory, opened.
pub struct Store {
    dir: PathBuf,
    manifest: Manifest,
    id: String,
}

impl Store {
    /// Opens the directory `dir` of `sweep --resume` for the sweep
    /// `manifest`, creating it (and its parents) if needed and writing the
    /// manifest if it has none. Refused (the error names `--resume` and
    /// `dir`): a path that is not a directory, a directory that cannot be
    /// read or written, one holding other files but no manifest, one whose
    /// manifest differs (naming what differs).
    pub fn create(dir: &Path, manifest: Manifest) -> Result<Store, String> {
        let shown = dir.display();
        let fail = |m: String| format!("--resume {shown}: {m}");
        match std::fs::metadata(dir) {
            Ok(m) if !m.is_dir() => return Err(fail("not a directory".into())),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::create_dir_all(dir)
                .map_err(|e| fail(format!("cannot create the directory: {}", why(&e))))?,
            Err(e) => return Err(fail(why(&e))),
        }
        match read_manifest(dir).map_err(fail)? {
            Some(there) => {
                if let Some(d) = there.difference(&manifest) {
                    return Err(fail(format!(
                        "it holds another sweep: {d}; rerun with the arguments that started it, or give a new directory"
                    )));
                }
                check_output("--resume", &dir.join(MANIFEST))?;
            }
            None => {
                if has_visible_files(dir).map_err(fail)? {
                    return Err(fail(format!(
                        "not empty and not a sweep's directory (no {MANIFEST})"
                    )));
                }
                let json = serde_json::to_vec_pretty(&manifest).map_err(|e| e.to_string())?;
                write_atomic(&dir.join(MANIFEST), &json).map_err(fail)?;
            }
        }
        Ok(Store::with(dir, manifest))
    }

    /// Opens the existing sweep directory `dir` (for `tlbsim merge`): its
    /// manifest must be there and readable. Errors start with `dir`.
    pub fn open(dir: &Path) -> Result<Store, String> {
        let shown = dir.display();
        match read_manifest(dir) {
            Ok(Some(m)) => Ok(Store::with(dir, m)),
            Ok(None) => Err(format!("{shown}: not a sweep's directory (no {MANIFEST})")),
            Err(e) => Err(format!("{shown}: {e}")),
        }
    }

    /// The store of `dir`, whose manifest is `manifest`.
    fn with(dir: &Path, manifest: Manifest) -> Store {
        let id = manifest.id();
        Store {
            dir: dir.to_path_buf(),
            manifest,
            id,
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sweep's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The file of point `index` (0-based), named by its number (1-based).
    fn point_path(&self, index: usize) -> PathBuf {
        point_path(&self.dir, index)
    }

    /// The finished point `index` (0-based), or `None` if it has not
    /// finished. A point file that does not read back as point `index` of
    /// this sweep with a row of `width` cells is an error naming the file.
    pub fn load(&self, index: usize, width: usize) -> Result<Option<Row>, String> {
        let path = self.point_path(index);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: cannot read: {}", path.display(), why(&e))),
        };
        let bad = |m: String| {
            format!(
                "{}: not a finished point of this sweep ({m}); remove it to run the point again",
                path.display()
            )
        };
        let p: PointFile = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        let key = self.manifest.points.get(index).map(String::as_str);
        if p.format != FORMAT || p.sweep != self.id {
            return Err(bad("written for another sweep".into()));
        }
        if p.index != index || Some(p.key.as_str()) != key {
            return Err(bad(format!("it holds point {} \"{}\"", p.index + 1, p.key)));
        }
        if p.row.cells.len() != width {
            return Err(bad(format!("{} cells, not {width}", p.row.cells.len())));
        }
        Ok(Some(p.row))
    }

    /// Keeps the finished point `index` and its `row`, whole or not at
    /// all. The error names the file.
    pub fn save(&self, index: usize, row: &Row) -> Result<(), String> {
        let p = PointFile {
            format: FORMAT.into(),
            sweep: self.id.clone(),
            index,
            key: self.manifest.points.get(index).cloned().unwrap_or_default(),
            row: row.clone(),
        };
        let json = serde_json::to_vec(&p).map_err(|e| e.to_string())?;
        write_atomic(&self.point_path(index), &json)
    }
}

/// The manifest in `dir`, or `None` if it has none. The error is the
/// reason (without `dir`).
fn read_manifest(dir: &Path) -> Result<Option<Manifest>, String> {
    let text = match std::fs::read(dir.join(MANIFEST)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {MANIFEST}: {}", why(&e))),
    };
    let m: Manifest = serde_json::from_slice(&text)
        .map_err(|e| format!("{MANIFEST} is not a sweep's manifest: {e}"))?;
    if m.format != FORMAT {
        return Err(format!(
            "{MANIFEST} is in format {:?}, this tlbsim reads {FORMAT:?}",
            m.format
        ));
    }
    Ok(Some(m))
}

/// Does `dir` hold a file or directory whose name does not start with
/// `.`? (Hidden ones include temporary files of a killed write.)
fn has_visible_files(dir: &Path) -> Result<bool, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read the directory: {}", why(&e)))?;
    for e in entries {
        let e = e.map_err(|e| format!("cannot read the directory: {}", why(&e)))?;
        if !e.file_name().to_string_lossy().starts_with('.') {
            return Ok(true);
        }
    }
    Ok(false)
}
