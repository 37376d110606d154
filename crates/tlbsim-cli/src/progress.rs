//! Progress bars on standard error (`indicatif`), drawn from the library's
//! counters ([`tlbsim::progress::PROGRESS`]) by a thread that looks at
//! them ten times a second. Nothing is drawn when standard error is not a
//! terminal, so logs and pipes get only the commands' own lines.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tlbsim::progress::{Snapshot, PROGRESS};

/// A bar being drawn; dropping it stops the drawing and clears the bar.
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

/// Starts drawing `bar`, updated from the counters' change since now by
/// `update` every 100 ms.
fn start(bar: ProgressBar, update: impl Fn(&ProgressBar, Snapshot, f64) + Send + 'static) -> Bar {
    let stop = Arc::new(AtomicBool::new(false));
    let thread = (!bar.is_hidden()).then(|| {
        let (bar, stop) = (bar.clone(), Arc::clone(&stop));
        let base = PROGRESS.snapshot();
        let t0 = Instant::now();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let now = PROGRESS.snapshot();
                let since = Snapshot {
                    sim_ns: now.sim_ns,
                    events: now.events - base.events,
                    runs_done: now.runs_done - base.runs_done,
                    schedules: now.schedules - base.schedules,
                };
                update(&bar, since, t0.elapsed().as_secs_f64());
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    });
    Bar { bar, stop, thread }
}

/// The draw target: standard error when it is a terminal, else nothing.
fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// One timing run: its simulated time against the limit, and events per
/// second of host time.
pub fn run(limit_ns: u64) -> Bar {
    let bar = ProgressBar::with_draw_target(None, target());
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
    start(bar, move |b, s, secs| {
        b.set_message(format!(
            "simulated {} of at most {}, {:.2} M events/s, {secs:.0} s",
            time(s.sim_ns),
            time(limit_ns),
            s.events as f64 / secs.max(1e-9) / 1e6
        ));
        b.tick();
    })
}

/// `total` units of work, counted by `done` (finished runs, schedules),
/// with their rate and the time left.
pub fn count(what: &'static str, total: u64, done: fn(&Snapshot) -> u64) -> Bar {
    count_on(target(), what, total, done)
}

/// [`count`], drawn on `target`.
fn count_on(
    target: ProgressDrawTarget,
    what: &'static str,
    total: u64,
    done: fn(&Snapshot) -> u64,
) -> Bar {
    let bar = ProgressBar::with_draw_target(Some(total), target);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("valid template"),
    );
    start(bar, move |b, s, secs| {
        let n = done(&s).min(total);
        let rate = n as f64 / secs.max(1e-9);
        let eta = if n == 0 {
            "-".to_string()
        } else {
            time(((total - n) as f64 / rate * 1e9) as u64)
        };
        b.set_position(n);
        b.set_message(format!(
            "{what}, {rate:.1}/s, {} elapsed, {eta} left",
            time((secs * 1e9) as u64)
        ));
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
        let bar = count_on(target, "schedules", 10, |s| s.schedules);
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

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(time(950), "950 ns");
        assert_eq!(time(12_345), "12.3 us");
        assert_eq!(time(25_000_000), "25.0 ms");
        assert_eq!(time(86_400_000_000_000), "86400.0 s");
    }
}
