//! One line of `perf script --ns -F comm,tid,pid,cpu,time,event,trace`,
//! and the `key=value` fields of a tracepoint's text.

/// One line of `perf script --ns -F comm,tid,pid,cpu,time,event,trace`.
pub struct Line<'a> {
    /// Process (thread group) id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The task's name (may hold spaces).
    pub comm: &'a str,
    /// CPU.
    pub cpu: u32,
    /// Time, ns.
    pub t_ns: u64,
    /// The event (`sched:sched_switch`).
    pub event: &'a str,
    /// The tracepoint's text.
    pub trace: &'a str,
}

/// Reads one line; `None` if it is not one.
pub fn parse(l: &str) -> Option<Line<'_>> {
    // "COMM PID/TID [CPU] SEC.NSEC: EVENT: TRACE"; COMM may hold spaces.
    let open = l.find(" [")?;
    let close = open + l[open..].find(']')?;
    let cpu = l[open + 2..close].trim().parse().ok()?;
    let (comm, ids) = l[..open].trim().rsplit_once(' ')?;
    let (pid, tid) = ids.split_once('/')?;
    let rest = l[close + 1..].trim_start();
    let (time, rest) = rest.split_once(": ")?;
    let (sec, ns) = time.split_once('.')?;
    let t_ns = sec.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?;
    let (event, trace) = match rest.split_once(": ") {
        Some((e, t)) => (e.trim(), t.trim()),
        None => (rest.trim().trim_end_matches(':'), ""),
    };
    Some(Line {
        pid: pid.trim().parse().ok()?,
        tid: tid.trim().parse().ok()?,
        comm: comm.trim(),
        cpu,
        t_ns,
        event,
        trace,
    })
}

/// The value of `key=` in a tracepoint's text (up to the next space).
pub fn field<'a>(trace: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("{key}=");
    let mut from = 0;
    while let Some(i) = trace[from..].find(&pat) {
        let at = from + i;
        if at == 0 || trace.as_bytes()[at - 1] == b' ' {
            let v = &trace[at + pat.len()..];
            return Some(v.split(' ').next().unwrap_or(""));
        }
        from = at + pat.len();
    }
    None
}

/// A number, decimal or `0x` hexadecimal.
pub fn num(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}
