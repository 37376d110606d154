//! The exhaustive search over a litmus test's runs: from the initial
//! state, every enabled [`Action`] (a thread's next instruction, a TLBI
//! reaching a CPU, a speculative fill, an eviction), depth first, with
//! states already seen skipped. A dedicated enumerator rather than the
//! experiment explorer (`explore/`): that one drives kernel tasks of an
//! experiment and replays each schedule from scratch; a litmus test's
//! whole state (registers, memory, TLBs, TLBIs in flight) is small, so
//! the search keeps a set of visited states and is exhaustive without a
//! preemption bound (docs/model.md, "Litmus tests").
//!
//! It is driven through [`Machine::enabled`] and [`Machine::apply`]
//! only, so a partial-order-reducing explorer can drive the same
//! machine.

use super::ast::{FaultKind, Loc, Val};
use super::machine::{Action, Machine, RunError, State, ThreadState};
use crate::hw::tlb::TlbiScope;
use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What the search found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Some final state satisfies the condition.
    pub some: bool,
    /// Some final state does not.
    pub some_not: bool,
    /// Distinct states visited.
    pub states: u64,
    /// Final states reached (distinct).
    pub finals: u64,
    /// A bound (states or memory) was hit: `some`/`some_not` are lower
    /// bounds.
    pub incomplete: bool,
    /// The bound hit was the memory [`Budget`]'s (implies `incomplete`).
    pub memory_bound: bool,
}

/// Memory shared by the searches of one process: the bytes their
/// visited-state stores and stacks hold, against a bound. A search
/// checks the bound before it grows (a new arena chunk, a larger hash
/// table, deeper stack) and stops, [`Outcome::memory_bound`], rather
/// than exceed it. Searches running at once draw on the same budget.
/// It also counts the states explored by all searches, for progress.
#[derive(Debug)]
pub struct Budget {
    limit_bytes: u64,
    held_bytes: AtomicU64,
    peak_bytes: AtomicU64,
    states: AtomicU64,
}

impl Budget {
    /// A budget of `limit_bytes` bytes.
    pub fn new(limit_bytes: u64) -> Self {
        Budget {
            limit_bytes,
            held_bytes: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
            states: AtomicU64::new(0),
        }
    }

    /// The bound, in bytes.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Bytes the running searches hold now.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes.load(Relaxed)
    }

    /// The most bytes held at once so far.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes.load(Relaxed)
    }

    /// States explored by every search so far (counted in batches of
    /// [`PROGRESS_BATCH`] while a search runs, exactly when it ends).
    pub fn states_explored(&self) -> u64 {
        self.states.load(Relaxed)
    }

    /// Changes the bytes held by `delta` (one search's change).
    fn adjust(&self, from: u64, to: u64) {
        if to >= from {
            let now = self.held_bytes.fetch_add(to - from, Relaxed) + (to - from);
            self.peak_bytes.fetch_max(now, Relaxed);
        } else {
            self.held_bytes.fetch_sub(from - to, Relaxed);
        }
    }

    /// Would a search now holding `mine` bytes stay within the bound
    /// holding `want` instead?
    fn fits(&self, mine: u64, want: u64) -> bool {
        let others = self.held_bytes().saturating_sub(mine);
        others.saturating_add(want) <= self.limit_bytes
    }
}

/// A search adds its explored states to [`Budget::states_explored`]
/// every this many states.
pub const PROGRESS_BATCH: u64 = 1024;

/// Bytes of the first arena chunk of the visited-state store; each next
/// chunk is as large as all before it, up to [`MAX_CHUNK_BYTES`] (a
/// small search holds little, a large one allocates rarely).
const MIN_CHUNK_BYTES: usize = 16 << 10;
/// The largest arena chunk.
const MAX_CHUNK_BYTES: usize = 4 << 20;

/// The visited states, each stored once as its canonical encoding
/// ([`encode`]): the encodings live end to end in fixed-size chunks (no
/// copy when the store grows, no per-state allocation) and a hash table
/// holds one `u64` position per state. Its size in bytes is exact:
/// [`Store::bytes`].
struct Store {
    chunks: Vec<Vec<u8>>,
    table: HashTable<u64>,
    hasher: rustc_hash::FxBuildHasher,
}

/// Inserting a state: new, seen before, or no room within the budget.
enum Insert {
    New,
    Seen,
    Full,
}

impl Store {
    fn new() -> Self {
        Store {
            chunks: Vec::new(),
            table: HashTable::new(),
            hasher: rustc_hash::FxBuildHasher,
        }
    }

    fn len(&self) -> u64 {
        self.table.len() as u64
    }

    /// Bytes allocated: the chunks and the table.
    fn bytes(&self) -> u64 {
        let chunks: usize = self.chunks.iter().map(Vec::capacity).sum();
        (chunks + self.table.allocation_size() + self.chunks.capacity() * 24) as u64
    }

    /// The encoding stored at `pos` (chunk in the high 32 bits).
    fn get(chunks: &[Vec<u8>], pos: u64) -> &[u8] {
        let c = &chunks[(pos >> 32) as usize];
        let mut at = (pos & 0xffff_ffff) as usize;
        let mut len = 0usize;
        let mut shift = 0;
        loop {
            let b = c[at];
            at += 1;
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        &c[at..at + len]
    }

    /// Inserts `key` unless present; `fits(extra)` says whether `extra`
    /// more bytes stay within the budget (asked before any growth).
    fn insert(&mut self, key: &[u8], fits: impl Fn(u64) -> bool) -> Insert {
        let hash = self.hasher.hash_one(key);
        let chunks = &self.chunks;
        if self
            .table
            .find(hash, |&p| Store::get(chunks, p) == key)
            .is_some()
        {
            return Insert::Seen;
        }
        let mut extra = 0u64;
        if self.table.len() == self.table.capacity() {
            // Growing allocates the new table while the old one lives.
            extra += (self.table.allocation_size() as u64 * 2).max(1024);
        }
        let mut head = Vec::with_capacity(10);
        put(&mut head, key.len() as u64);
        let need = head.len() + key.len();
        let room = self
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= need);
        let held: usize = self.chunks.iter().map(Vec::capacity).sum();
        let size = need.max(held.clamp(MIN_CHUNK_BYTES, MAX_CHUNK_BYTES));
        if !room {
            extra += size as u64;
        }
        if extra > 0 && !fits(extra) {
            return Insert::Full;
        }
        if !room {
            self.chunks.push(Vec::with_capacity(size));
        }
        let ci = self.chunks.len() - 1;
        let c = &mut self.chunks[ci];
        let pos = ((ci as u64) << 32) | c.len() as u64;
        c.extend_from_slice(&head);
        c.extend_from_slice(key);
        let (chunks, hasher) = (&self.chunks, &self.hasher);
        self.table
            .insert_unique(hash, pos, |&p| hasher.hash_one(Store::get(chunks, p)));
        Insert::New
    }
}

/// A state on the depth-first path, with the choices left to try.
struct Frame {
    state: State,
    actions: Vec<Action>,
    next: usize,
}

/// Explores every run of `m` (at most `max_states` distinct states) and
/// reports whether final states satisfy the test's condition. Memory is
/// not bounded: [`explore_within`] bounds it.
pub fn explore(m: &Machine<'_>, max_states: u64) -> Result<Outcome, RunError> {
    explore_within(m, max_states, &Budget::new(u64::MAX))
}

/// [`explore`], holding at most what `budget` allows: the search stops
/// with [`Outcome::memory_bound`] set before its store and stack would
/// take the budget over its bound.
///
/// Depth first, one `Frame` per state on the current path (the stack
/// holds the path, not every state waiting to be expanded), each new
/// state recorded in the store by its canonical encoding.
pub fn explore_within(
    m: &Machine<'_>,
    max_states: u64,
    budget: &Budget,
) -> Result<Outcome, RunError> {
    let init = m.initial()?;
    let mut s = Search {
        out: Outcome::default(),
        store: Store::new(),
        stack: Vec::new(),
        frame_bytes: (std::mem::size_of::<Frame>() as u64) + init.approx_heap_bytes(),
        mine: 0,
        reported: 0,
        max_states,
        budget,
    };
    let mut buf = Vec::new();
    encode(&init, &mut buf);
    let mut pending = init;
    let result = loop {
        match s.visit(m, pending, &buf) {
            Visit::Stop => break Ok(()),
            Visit::Go => {}
        }
        match s.next_candidate(m) {
            None => break Ok(()),
            Some(Err(e)) => break Err(e),
            Some(Ok(st)) => {
                buf.clear();
                encode(&st, &mut buf);
                pending = st;
            }
        }
    };
    budget.states.fetch_add(s.out.states - s.reported, Relaxed);
    budget.adjust(s.mine, 0);
    result.map(|()| s.out)
}

/// One search's state: what it found, its store and path, and the bytes
/// it holds of the [`Budget`].
struct Search<'b> {
    out: Outcome,
    store: Store,
    stack: Vec<Frame>,
    /// Bytes counted for each state on the stack.
    frame_bytes: u64,
    /// Bytes this search holds of the budget.
    mine: u64,
    /// States already added to the budget's count.
    reported: u64,
    /// The state bound.
    max_states: u64,
    budget: &'b Budget,
}

/// Whether the search goes on after a visit.
enum Visit {
    Go,
    /// A bound (states or memory) was reached.
    Stop,
}

impl Search<'_> {
    /// Bytes held with `depth` states on the stack.
    fn held(&self, depth: usize) -> u64 {
        self.store.bytes() + depth as u64 * self.frame_bytes
    }

    /// Records `st` (encoded as `key`) if new: counts it, evaluates the
    /// condition if it is final, else pushes it to be expanded.
    fn visit(&mut self, m: &Machine<'_>, st: State, key: &[u8]) -> Visit {
        let depth = self.stack.len() + 1;
        let now = self.held(depth);
        let (budget, mine) = (self.budget, self.mine);
        match self
            .store
            .insert(key, |extra| budget.fits(mine, now + extra))
        {
            Insert::Seen => return Visit::Go,
            Insert::Full => return self.stop(),
            Insert::New => {}
        }
        if self.store.len() > self.max_states {
            self.out.incomplete = true;
            return Visit::Stop;
        }
        let now = self.held(depth);
        if !self.budget.fits(self.mine, now) {
            return self.stop();
        }
        self.budget.adjust(self.mine, now);
        self.mine = now;
        self.out.states += 1;
        if self.out.states - self.reported >= PROGRESS_BATCH {
            self.budget
                .states
                .fetch_add(self.out.states - self.reported, Relaxed);
            self.reported = self.out.states;
        }
        if m.is_final(&st) {
            self.out.finals += 1;
            if m.eval(&st, &m.test.cond) {
                self.out.some = true;
            } else {
                self.out.some_not = true;
            }
        } else {
            let actions = m.enabled(&st);
            self.stack.push(Frame {
                state: st,
                actions,
                next: 0,
            });
        }
        Visit::Go
    }

    /// Stops at the memory bound.
    fn stop(&mut self) -> Visit {
        self.out.incomplete = true;
        self.out.memory_bound = true;
        Visit::Stop
    }

    /// The next state to visit: the top frame's next choice applied
    /// (frames with none left are popped); `None` when the path is empty.
    fn next_candidate(&mut self, m: &Machine<'_>) -> Option<Result<State, RunError>> {
        loop {
            let f = self.stack.last_mut()?;
            if f.next == f.actions.len() {
                self.stack.pop();
                continue;
            }
            let a = f.actions[f.next];
            f.next += 1;
            let mut st = f.state.clone();
            return Some(m.apply(&mut st, a).map(|()| st));
        }
    }
}

/// Appends `v` as a LEB128 varint.
fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `None` as 0, `Some(v)` as `v + 1`.
fn put_opt(out: &mut Vec<u8>, v: Option<usize>) {
    put(out, v.map_or(0, |v| v as u64 + 1));
}

fn put_val(out: &mut Vec<u8>, v: &Val) {
    match *v {
        Val::Int(i) => {
            out.push(0);
            // Zigzag: small negative numbers stay short.
            put(out, ((i << 1) ^ (i >> 63)) as u64);
        }
        Val::Va(s, off) => {
            out.push(1);
            put(out, u64::from(s));
            put(out, u64::from(off));
        }
        Val::Page(s) => {
            out.push(2);
            put(out, u64::from(s));
        }
        Val::PteAddr(s) => {
            out.push(3);
            put(out, u64::from(s));
        }
        Val::Pa(s) => {
            out.push(4);
            put(out, u64::from(s));
        }
        Val::Pte(p) => {
            out.push(5);
            put(out, p.oa.map_or(0, |s| u64::from(s) + 1));
            out.extend_from_slice(&[p.valid, p.af, p.db, p.dbm, p.el0]);
        }
        Val::Label(t, s) => {
            out.push(6);
            out.push(t);
            put(out, u64::from(s));
        }
    }
}

fn put_loc(out: &mut Vec<u8>, l: &Loc) {
    match *l {
        Loc::Reg(p, r) => out.extend_from_slice(&[0, p, r]),
        Loc::Data(s, off) => {
            out.push(1);
            put(out, u64::from(s));
            put(out, u64::from(off));
        }
        Loc::Pte(s) => {
            out.push(2);
            put(out, u64::from(s));
        }
    }
}

/// A thread's position, flags and the registers that are not 0 (most
/// of the 31 are, and a zero register costs nothing).
fn put_thread(out: &mut Vec<u8>, t: &ThreadState) {
    put(out, t.pc as u64);
    put_opt(out, t.handler_pc);
    put_opt(out, t.elr);
    let flags = match t.flags_eq {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    };
    out.push(flags | (u8::from(t.done) << 2));
    for (i, v) in t.regs.iter().enumerate() {
        if *v != Val::Int(0) {
            out.push(i as u8);
            put_val(out, v);
        }
    }
    out.push(0xff);
}

/// The canonical encoding of a state: equal encodings, equal futures,
/// and distinct states, distinct encodings (every part is written so
/// that it ends unambiguously). TLB contents enter as sorted sets (LRU
/// order and slot positions do not change what a TLB can return), TLBIs
/// in flight by issuer, scope and remaining targets. The thread and CPU
/// counts are the test's, so they need no length.
fn encode(st: &State, out: &mut Vec<u8>) {
    for t in &st.threads {
        put_thread(out, t);
    }
    put(out, st.mem.len() as u64);
    for (l, v) in &st.mem {
        put_loc(out, l);
        put_val(out, v);
    }
    put(out, st.faults.len() as u64);
    for f in &st.faults {
        out.push(f.proc);
        put(out, f.pc as u64);
        put(out, u64::from(f.var));
        out.push(match f.kind {
            FaultKind::Translation => 0,
            FaultKind::AccessFlag => 1,
            FaultKind::Permission => 2,
        });
    }
    let mut leaves = Vec::new();
    let mut walks = Vec::new();
    for c in &st.hw.cpus {
        leaves.clear();
        leaves.extend(
            c.tlb
                .leaf_entries()
                .map(|e| (e.vpn, e.pfn, e.perms.0, e.version)),
        );
        leaves.sort_unstable();
        put(out, leaves.len() as u64);
        for &(vpn, pfn, perms, version) in &leaves {
            put(out, vpn);
            put(out, pfn);
            out.push(perms);
            put(out, version);
        }
        walks.clear();
        walks.extend(c.tlb.walk_entries().map(|w| (w.level, w.va_prefix, w.next)));
        walks.sort_unstable();
        put(out, walks.len() as u64);
        for &(level, prefix, next) in &walks {
            out.push(level);
            put(out, prefix);
            put(out, u64::from(next));
        }
    }
    let mut inflight: Vec<_> = st
        .hw
        .inflight
        .iter()
        .flatten()
        .map(|f| {
            let scope = match f.scope {
                TlbiScope::Va { va, last_level, .. } => (0, va, last_level),
                TlbiScope::Asid(a) => (1, u64::from(a), false),
                TlbiScope::All => (2, 0, false),
                _ => (3, 0, false),
            };
            (f.issuer, scope, f.pending.iter().collect::<Vec<_>>())
        })
        .collect();
    inflight.sort_unstable();
    put(out, inflight.len() as u64);
    for (issuer, (kind, va, last), pending) in &inflight {
        put(out, u64::from(issuer.get()));
        out.push(*kind);
        put(out, *va);
        out.push(u8::from(*last));
        put(out, pending.len() as u64);
        for &c in pending {
            put(out, u64::from(c.get()));
        }
    }
}

/// Applies `actions` in order from the initial state (a schedule found
/// by the search, or written by hand in a test) and returns the state.
pub fn replay(m: &Machine<'_>, actions: &[Action]) -> Result<State, RunError> {
    let mut st = m.initial()?;
    for &a in actions {
        m.apply(&mut st, a)?;
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::litmus::machine::Options;
    use crate::litmus::parse::parse;
    use crate::litmus::search::replay;

    /// A writer and two readers of two variables: some tens of
    /// thousands of states.
    const WIDE: &str = "AArch64 wide
{
0:X1=x; 0:X2=y; 1:X1=y; 1:X2=x; 2:X1=x; 2:X2=y;
}
 P0          | P1          | P2          ;
 MOV W0,#1   | LDR W4,[X1] | LDR W4,[X1] ;
 STR W0,[X1] | LDR W5,[X2] | LDR W5,[X2] ;
 STR W0,[X2] |             |             ;
exists(1:X4=1 /\\ 1:X5=0)
";

    #[test]
    fn a_search_stops_at_the_memory_bound_and_gives_its_memory_back() {
        let t = parse(WIDE).unwrap();
        let m = Machine::new(&t, Options::default());
        let unbounded = Budget::new(u64::MAX);
        let full = explore_within(&m, 10_000_000, &unbounded).unwrap();
        assert!(!full.incomplete && !full.memory_bound);
        assert!(full.states > 2_000, "{full:?}");
        assert_eq!(unbounded.held_bytes(), 0);
        assert_eq!(unbounded.states_explored(), full.states);

        // Half of what the whole search took: it stops, and never held
        // more than the bound.
        let limit = unbounded.peak_bytes() / 2;
        let half = Budget::new(limit);
        let o = explore_within(&m, 10_000_000, &half).unwrap();
        assert!(o.incomplete && o.memory_bound, "{o:?}");
        assert!(o.states > 0 && o.states < full.states, "{o:?}");
        assert!(half.peak_bytes() <= limit);
        assert_eq!(half.held_bytes(), 0);
        // The same bound, the same stop: the count is deterministic.
        let again = explore_within(&m, 10_000_000, &Budget::new(limit)).unwrap();
        assert_eq!(again, o);
        // A state bound is not a memory bound.
        let o = explore(&m, 100).unwrap();
        assert!(o.incomplete && !o.memory_bound);
    }

    #[test]
    fn a_stored_state_costs_far_less_than_the_state() {
        // The issue measured ~3,700 bytes a state (370 MB per 100,000) on
        // a 4-thread test, most of it 31 registers of 16 bytes a thread:
        // the store's encodings skip zero registers.
        let t = parse(WIDE).unwrap();
        let m = Machine::new(&t, Options::default());
        let st = replay(&m, &[Action::Step(0), Action::Step(1), Action::Step(2)]).unwrap();
        let mut e = Vec::new();
        encode(&st, &mut e);
        let regs_alone = 3 * std::mem::size_of::<[Val; 31]>();
        assert!(e.len() * 10 < regs_alone, "{} bytes", e.len());
        // The whole search, store and stack (the path: ~15 KiB a state
        // on it here), under a third of the old cost a state even this
        // small (2,288 states).
        let b = Budget::new(u64::MAX);
        let o = explore_within(&m, 10_000_000, &b).unwrap();
        let per_state = b.peak_bytes() / o.states;
        assert!(per_state < 1_000, "{per_state} bytes a state: {o:?}");
    }
}
