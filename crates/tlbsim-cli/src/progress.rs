//! Progress on standard error, drawn from the library's counters
//! ([`tlbsim::progress::PROGRESS`]) by a thread that looks at them ten
//! times a second: an `indicatif` bar when standard error is a terminal;
//! otherwise (a log, a pipe, CI) a plain line every [`LINE_PERIOD`], the
//! first after one period, so that a run of a few seconds prints nothing
//! and a long one shows it is alive. Never on standard output.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tlbsim::progress::{Snapshot, PROGRESS};

/// How often a plain progress line is printed off a terminal.
pub const LINE_PERIOD: Duration = Duration::from_secs(10);

/// A bar or line printer at work; dropping it stops it and clears the bar.
pub struct Bar {
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Bar {
    /// Prints `line` on standard error above the bar (or plainly, when no
    /// bar is drawn).
    pub fn eprintln(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.bar.finish_and_clear();
    }
}

/// Where progress goes.
enum Show {
    /// A bar on this target (a terminal).
    Bar(ProgressDrawTarget),
    /// Plain lines (standard error off a terminal).
    Lines(Lines),
}

/// A line every `period` into `out`.
struct Lines {
    out: Arc<Mutex<dyn Write + Send>>,
    period: Duration,
}

/// What one look at the counters shows: a position out of the bar's
/// length, if it counts, and a message.
struct Status {
    pos: Option<u64>,
    msg: String,
}

/// A bar on a terminal, else lines on standard error.
fn show() -> Show {
    if std::io::stderr().is_terminal() {
        Show::Bar(ProgressDrawTarget::stderr())
    } else {
        Show::Lines(Lines {
            out: Arc::new(Mutex::new(std::io::stderr())),
            period: LINE_PERIOD,
        })
    }
}

/// Starts showing `bar` (of length `len`, if it counts), or printing
/// `lines` if given, from the counters' change since now as `status`
/// reads it, every 100 ms.
fn start(
    bar: ProgressBar,
    lines: Option<Lines>,
    len: Option<u64>,
    status: impl Fn(Snapshot, f64) -> Status + Send + 'static,
) -> Bar {
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (bar, stop) = (bar.clone(), Arc::clone(&stop));
        let base = PROGRESS.snapshot();
        let t0 = Instant::now();
        std::thread::spawn(move || {
            let mut printed = t0;
            while !stop.load(Ordering::Relaxed) {
                let now = PROGRESS.snapshot();
                let since = Snapshot {
                    sim_ns: now.sim_ns,
                    events: now.events - base.events,
                    runs_done: now.runs_done - base.runs_done,
                    schedules: now.schedules - base.schedules,
                };
                let s = status(since, t0.elapsed().as_secs_f64());
                match &lines {
                    None => {
                        if let Some(p) = s.pos {
                            bar.set_position(p);
                        }
                        bar.set_message(s.msg);
                        bar.tick();
                    }
                    Some(l) if printed.elapsed() >= l.period => {
                        printed = Instant::now();
                        let line = match (s.pos, len) {
                            (Some(p), Some(n)) => format!("progress: {p}/{n} {}", s.msg),
                            _ => format!("progress: {}", s.msg),
                        };
                        if let Ok(mut o) = l.out.lock() {
                            let _ = writeln!(o, "{line}");
                        }
                    }
                    Some(_) => {}
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    Bar {
        bar,
        stop,
        thread: Some(thread),
    }
}

/// The bar of `show` (drawn on its target, or hidden when lines are
/// printed instead) and the lines, if any.
fn new_bar(show: Show, len: Option<u64>) -> (ProgressBar, Option<Lines>) {
    match show {
        Show::Bar(t) => (ProgressBar::with_draw_target(len, t), None),
        Show::Lines(l) => (
            ProgressBar::with_draw_target(len, ProgressDrawTarget::hidden()),
            Some(l),
        ),
    }
}

/// One timing run: its simulated time against the limit, and events per
/// second of host time.
pub fn run(limit_ns: u64) -> Bar {
    run_on(show(), limit_ns)
}

/// [`run`], shown as `show` says.
fn run_on(show: Show, limit_ns: u64) -> Bar {
    let (bar, lines) = new_bar(show, None);
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
    start(bar, lines, None, move |s, secs| Status {
        pos: None,
        msg: format!(
            "simulated {} of at most {}, {:.2} M events/s, {secs:.0} s",
            time(s.sim_ns),
            time(limit_ns),
            s.events as f64 / secs.max(1e-9) / 1e6
        ),
    })
}

/// `total` units of work, counted by `done` (finished runs, schedules),
/// with their rate and the time left.
pub fn count(what: &'static str, total: u64, done: fn(&Snapshot) -> u64) -> Bar {
    count_on(show(), what, total, done)
}

/// [`count`], shown as `show` says.
fn count_on(show: Show, what: &'static str, total: u64, done: fn(&Snapshot) -> u64) -> Bar {
    let (bar, lines) = new_bar(show, Some(total));
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("valid template"),
    );
    start(bar, lines, Some(total), move |s, secs| {
        let n = done(&s).min(total);
        let rate = n as f64 / secs.max(1e-9);
        let eta = if n == 0 {
            "-".to_string()
        } else {
            time(((total - n) as f64 / rate * 1e9) as u64)
        };
        Status {
            pos: Some(n),
            msg: format!(
                "{what}, {rate:.1}/s, {} elapsed, {eta} left",
                time((secs * 1e9) as u64)
            ),
        }
    })
}

/// `ns` as a person reads a duration.
fn time(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns} ns"),
        10_000..=9_999_999 => format!("{:.1} us", ns as f64 / 1e3),
        10_000_000..=9_999_999_999 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.1} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A terminal that keeps what is drawn on it.
    #[derive(Debug, Default, Clone)]
    struct Screen(Arc<Mutex<String>>);

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            120
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(&format!("{s}\n"));
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_count_bar_follows_the_librarys_counters() {
        // `check --schedules 18446744073709551615` once printed nothing for
        // minutes: on a terminal the bar now shows the schedules done.
        let screen = Screen::default();
        let target = ProgressDrawTarget::term_like(Box::new(screen.clone()));
        let bar = count_on(Show::Bar(target), "schedules", 10, |s| s.schedules);
        for _ in 0..3 {
            PROGRESS.schedule_done();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !screen.0.lock().unwrap().contains("3/10 schedules") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(bar);
        let drawn = screen.0.lock().unwrap().clone();
        assert!(drawn.contains("3/10 schedules"), "{drawn:?}");
    }

    /// A writer that keeps what is written to it.
    #[derive(Default, Clone)]
    struct Log(Arc<Mutex<Vec<u8>>>);

    impl Write for Log {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn off_a_terminal_a_plain_line_is_printed_each_period_and_none_before() {
        // A run of `--set workload.iterations=...` printed nothing for 25
        // minutes into a log: now a line each period (10 s; 50 ms here).
        let log = Log::default();
        let lines = |period| {
            Show::Lines(Lines {
                out: Arc::new(Mutex::new(log.clone())),
                period,
            })
        };
        let bar = run_on(lines(Duration::from_millis(50)), 600_000_000_000);
        std::thread::sleep(Duration::from_millis(400));
        drop(bar);
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        let n = text.lines().count();
        assert!((2..=8).contains(&n), "{text:?}");
        assert!(
            text.lines()
                .all(|l| l.starts_with("progress: simulated ")
                    && l.contains(" of at most 600.0 s, ")),
            "{text:?}"
        );
        // A short run prints nothing.
        let quiet = Log::default();
        let bar = count_on(
            Show::Lines(Lines {
                out: Arc::new(Mutex::new(quiet.clone())),
                period: Duration::from_secs(10),
            }),
            "points",
            5,
            |s| s.runs_done,
        );
        std::thread::sleep(Duration::from_millis(200));
        drop(bar);
        assert!(quiet.0.lock().unwrap().is_empty());
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(time(950), "950 ns");
        assert_eq!(time(12_345), "12.3 us");
        assert_eq!(time(25_000_000), "25.0 ms");
        assert_eq!(time(86_400_000_000_000), "86400.0 s");
    }
}
