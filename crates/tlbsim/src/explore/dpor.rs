//! Dynamic partial-order reduction over the footprints the explorer
//! records as actions run ([`crate::engine::track`]), with sleep sets
//! (Godefroid 1996), stateless: each schedule is rebuilt from the
//! experiment and replays a prefix of choices, as the delay-bounded search
//! does ([`super::exhaustive`]). There is no preemption bound: the search
//! is complete when every class of equivalent schedules (schedules that
//! differ only in the order of adjacent actions whose footprints do not
//! conflict) has had one member run.
//!
//! Processes: each [`Action`] value stands for the process whose next
//! transition it is (`Step(c)`: CPU `c`'s next step; `Deliver(t)`: the
//! next TLBI arrival at `t`; `Interrupt(c)`; each `Speculate(c, va)`).
//!
//! Race analysis (after each schedule, `DporChooser::analyse`): the
//! races of its new actions ([`super::races`]) get one of the initials of
//! their reversal into a backtrack set (source-DPOR, Abdulla et al., POPL
//! 2014); actions enabled somewhere and never taken after are added as
//! Flanagan and Godefroid (POPL 2005) add a process's next transition,
//! with the footprint known before they run ([`super::footprint`]).
//!
//! Sleep sets: a state's sleep set is fixed when the state is first
//! reached: the parent's sleep set and the parent's choices explored
//! before this one, each with its footprint there, less those whose
//! footprint conflicts with this one's. A schedule whose every enabled
//! action sleeps is redundant and stops (counted as pruned).
//!
//! **Order** (docs/model.md, "The explorer's footprints and DPOR"): the
//! explored tree is kept (the states with a backtrack choice left and
//! their ancestors; finished subtrees are freed), and the next schedule
//! leaves it at a backtrack choice drawn at random (stream `dpor/pick`),
//! then chooses among the actions not asleep at every new state by
//! partial-order-aware sampling (`explore/pos.rs`, stream `dpor/walk`).
//! Any order of backtrack choices and any choice at a new state keep the
//! search complete; a random one spreads the schedules over the whole run,
//! where depth-first order spends them near the end of the first
//! schedule. When the tree holds [`MAX_TREE_NODES`] states the search
//! takes the deepest backtrack choice of the last schedule instead
//! (depth-first), which frees subtrees as it finishes them, so memory
//! stays bounded.

use super::check::{CheckOptions, CheckReport, OneRun};
use super::footprint::footprint;
use super::pos::Priorities;
use super::races::Hb;
use super::random::{pick, SPEC_PROB};
use super::{Action, Chooser, Explorer, Stop};
use crate::engine::rng::{Rng, Streams};
use crate::engine::track::Footprint;
use rand::Rng as _;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::rc::Rc;

/// The most states the explored tree keeps before the search turns
/// depth-first: about 56 bytes each with the queue of open states, 455 MB
/// peak RSS at the cap on `seed002-explore` (docs/validation.md, "DPOR").
pub const MAX_TREE_NODES: usize = 1 << 23;

/// `check --max-spin` by default: the spinning actions in a row after
/// which DPOR cuts a schedule ([`Stop::Spinning`]). Whole schedules of
/// the kernel experiments run 300 to 600 actions; a spin loop of the
/// `threads` workload's readers is one action per turn.
pub const DEFAULT_MAX_SPIN: usize = 1_000;

/// No node (the root's parent).
const NONE: u32 = u32::MAX;

/// The backtrack and done sets of a state: sets of indices into its
/// enabled list (the first 64 inline, the rest in `hi`).
#[derive(Debug, Clone, Default)]
struct Choices {
    backtrack: u64,
    done: u64,
    /// Words of indices 64 and up: (backtrack, done) per word.
    // A thin pointer (8 bytes, null when unused): every state of the tree
    // carries this field, and almost none uses it.
    #[allow(clippy::box_collection)]
    hi: Option<Box<Vec<(u64, u64)>>>,
}

impl Choices {
    /// Index `i` in the backtrack set and done.
    fn taken(i: usize) -> Self {
        let mut c = Choices::default();
        c.insert(i, true);
        c
    }

    /// Adds `i` to the backtrack set, and to the done set if `done`.
    fn insert(&mut self, i: usize, done: bool) {
        if i < 64 {
            self.backtrack |= 1 << i;
            self.done |= u64::from(done) << i;
            return;
        }
        let hi = self.hi.get_or_insert_with(Default::default);
        let w = i / 64 - 1;
        if hi.len() <= w {
            hi.resize(w + 1, (0, 0));
        }
        hi[w].0 |= 1 << (i % 64);
        hi[w].1 |= u64::from(done) << (i % 64);
    }

    /// Is `i` in the backtrack set and not done?
    fn pending(&self, i: usize) -> bool {
        let (b, d, bit) = if i < 64 {
            (self.backtrack, self.done, i)
        } else {
            match self.hi.as_ref().and_then(|h| h.get(i / 64 - 1)) {
                Some(&(b, d)) => (b, d, i % 64),
                None => return false,
            }
        };
        b & !d & (1 << bit) != 0
    }

    /// Is `i` in the backtrack set (explored or to explore)?
    fn in_backtrack(&self, i: usize) -> bool {
        if i < 64 {
            return self.backtrack & (1 << i) != 0;
        }
        self.hi
            .as_ref()
            .and_then(|h| h.get(i / 64 - 1))
            .is_some_and(|&(b, _)| b & (1 << (i % 64)) != 0)
    }

    /// Is `i` done?
    fn done(&self, i: usize) -> bool {
        if i < 64 {
            return self.done & (1 << i) != 0;
        }
        self.hi
            .as_ref()
            .and_then(|h| h.get(i / 64 - 1))
            .is_some_and(|&(_, d)| d & (1 << (i % 64)) != 0)
    }
}

/// One state of the explored tree.
#[derive(Debug, Clone)]
struct Node {
    /// The parent state (`NONE` for the first state).
    parent: u32,
    /// The index, in the parent's enabled list, of the choice that led
    /// here.
    via: u32,
    /// The actions enabled here (an interned list).
    enabled: u32,
    /// The actions asleep here, with their footprints (an interned
    /// list).
    sleep: u32,
    /// Live children.
    children: u32,
    /// In use (else on the free list).
    alive: bool,
    /// An entry for this slot is in [`Tree::open`].
    in_open: bool,
    /// Choices to explore here and choices explored here.
    choices: Choices,
    /// The footprint of the first choice explored here: (choice, interned
    /// footprint).
    fp: (u32, u32),
    /// Those of the other choices explored here.
    // A thin pointer, as `Choices::hi`.
    #[allow(clippy::box_collection)]
    more_fps: Option<Box<Vec<(u32, u32)>>>,
}

/// No footprint recorded.
const NO_FP: u32 = u32::MAX;

/// The explored tree: the states with a backtrack choice left and their
/// ancestors, in an arena; action lists interned.
#[derive(Debug, Default)]
struct Tree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    live: usize,
    peak: usize,
    lists: Vec<Vec<Action>>,
    index: BTreeMap<Vec<Action>, u32>,
    /// Sleep sets: (action, interned footprint), sorted.
    sleeps: Vec<Vec<(Action, u32)>>,
    sleep_index: BTreeMap<Vec<(Action, u32)>, u32>,
    /// Footprints, interned.
    fps: Vec<Footprint>,
    fp_index: BTreeMap<Footprint, u32>,
    /// Slots that may have a backtrack choice left (checked when drawn),
    /// shallowest first, ties by a random key: `depth << 40 | key << 32 |
    /// slot`.
    open: BinaryHeap<Reverse<u64>>,
}

impl Tree {
    fn intern(&mut self, l: &[Action]) -> u32 {
        if let Some(&i) = self.index.get(l) {
            return i;
        }
        let i = self.lists.len() as u32;
        self.lists.push(l.to_vec());
        self.index.insert(l.to_vec(), i);
        i
    }

    fn intern_sleep(&mut self, l: &[(Action, u32)]) -> u32 {
        if let Some(&i) = self.sleep_index.get(l) {
            return i;
        }
        let i = self.sleeps.len() as u32;
        self.sleeps.push(l.to_vec());
        self.sleep_index.insert(l.to_vec(), i);
        i
    }

    fn intern_fp(&mut self, f: &Footprint) -> u32 {
        if let Some(&i) = self.fp_index.get(f) {
            return i;
        }
        let i = self.fps.len() as u32;
        self.fps.push(f.clone());
        self.fp_index.insert(f.clone(), i);
        i
    }

    fn enabled(&self, n: u32) -> &[Action] {
        &self.lists[self.nodes[n as usize].enabled as usize]
    }

    /// The footprint recorded for choice `j` of `n`, if it ran.
    fn fp_of(&self, n: u32, j: usize) -> Option<u32> {
        let node = &self.nodes[n as usize];
        if node.fp.0 == j as u32 && node.fp.1 != NO_FP {
            return Some(node.fp.1);
        }
        node.more_fps
            .as_ref()
            .and_then(|v| v.iter().find(|e| e.0 == j as u32))
            .map(|e| e.1)
    }

    /// Records the footprint `f` of choice `j` of `n` (the same every time
    /// it runs: the explorer is deterministic).
    fn set_fp(&mut self, n: u32, j: usize, f: u32) {
        if self.fp_of(n, j).is_some() {
            return;
        }
        let node = &mut self.nodes[n as usize];
        if node.fp.1 == NO_FP {
            node.fp = (j as u32, f);
        } else {
            node.more_fps
                .get_or_insert_with(Default::default)
                .push((j as u32, f));
        }
    }

    /// A new state below `parent` (choice `via` there), with `enabled`,
    /// asleep `sleep`, taking choice `taken`.
    fn add(&mut self, parent: u32, via: u32, enabled: u32, sleep: u32, taken: usize) -> u32 {
        let node = Node {
            parent,
            via,
            enabled,
            sleep,
            children: 0,
            alive: true,
            in_open: false,
            choices: Choices::taken(taken),
            fp: (0, NO_FP),
            more_fps: None,
        };
        let id = match self.free.pop() {
            Some(id) => {
                let in_open = self.nodes[id as usize].in_open;
                self.nodes[id as usize] = Node { in_open, ..node };
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        if parent != NONE {
            self.nodes[parent as usize].children += 1;
        }
        self.live += 1;
        self.peak = self.peak.max(self.live);
        id
    }

    /// The backtrack choices of `n` not yet explored and not asleep.
    fn pending(&self, n: u32) -> impl Iterator<Item = usize> + '_ {
        let node = &self.nodes[n as usize];
        let sleep = &self.sleeps[node.sleep as usize];
        self.enabled(n)
            .iter()
            .enumerate()
            .filter(|&(i, a)| node.choices.pending(i) && !sleep.iter().any(|s| s.0 == *a))
            .map(|(i, _)| i)
    }

    fn has_pending(&self, n: u32) -> bool {
        self.pending(n).next().is_some()
    }

    /// Puts `n`, at `depth`, among the open states if it has a choice
    /// left.
    fn mark_open(&mut self, n: u32, depth: usize, rng: &mut Rng) {
        if !self.nodes[n as usize].in_open && self.has_pending(n) {
            self.nodes[n as usize].in_open = true;
            let depth = (depth as u64).min((1 << 24) - 1);
            let key = u64::from(rng.gen::<u8>());
            self.open
                .push(Reverse(depth << 40 | key << 32 | u64::from(n)));
        }
    }

    /// Frees `n` (no choice left, no live children).
    fn release(&mut self, n: u32) {
        let node = &mut self.nodes[n as usize];
        node.alive = false;
        let parent = node.parent;
        self.free.push(n);
        self.live -= 1;
        if parent != NONE {
            self.nodes[parent as usize].children -= 1;
        }
    }

    /// The shallowest state with a backtrack choice left, or `None`.
    fn shallowest_open(&mut self) -> Option<u32> {
        while let Some(&Reverse(e)) = self.open.peek() {
            let n = e as u32;
            if self.nodes[n as usize].alive && self.has_pending(n) {
                return Some(n);
            }
            self.open.pop();
            self.nodes[n as usize].in_open = false;
        }
        None
    }
}

/// The DPOR chooser: follows the prefix of the schedule being
/// re-entered, then chooses among the actions not asleep by
/// partial-order-aware sampling (`explore/pos.rs`).
#[derive(Debug)]
pub struct DporChooser {
    tree: Tree,
    /// The prefix to replay: (state, choice index) per depth.
    replay: Vec<(u32, u32)>,
    /// The current schedule: (state, choice index) per depth.
    path: Vec<(u32, u32)>,
    /// Why the schedule stops at the new state, if it does: every action
    /// enabled there sleeps, or `max_spin` actions in a row spun.
    stop: Option<Stop>,
    /// Spinning actions in a row after which the schedule is cut
    /// ([`Stop::Spinning`]).
    max_spin: usize,
    /// The last action was chosen at a new state where another enabled
    /// action slept.
    asleep: bool,
    /// Each process's last footprint (interned) in this schedule.
    last_fp: Vec<(Action, u32)>,
    /// Actions in a row up to the last, each chosen while another enabled
    /// action slept and each with its process's previous footprint.
    spin: usize,
    /// The walk's priorities at new states ([`super::pos`]).
    prio: Priorities,
    /// Choices at new states (stream `dpor/walk`).
    walk: Rng,
    /// Which backtrack choice is explored next (stream `dpor/pick`).
    draw: Rng,
    /// States kept before the search turns depth-first.
    cap: usize,
    /// The footprints (interned) of the current schedule's actions so
    /// far, recorded as they ran.
    fps: Vec<u32>,
}

impl DporChooser {
    /// A chooser whose random choices come from `streams`, keeping at
    /// most `cap` states before it turns depth-first, and cutting a
    /// schedule after `max_spin` spinning actions in a row
    /// ([`Stop::Spinning`]; `usize::MAX`: never).
    pub fn new(streams: &Streams, cap: usize, max_spin: usize) -> Self {
        let mut tree = Tree::default();
        tree.intern(&[]);
        tree.intern_sleep(&[]); // sleep set 0: empty
        Self {
            tree,
            replay: Vec::new(),
            path: Vec::new(),
            stop: None,
            max_spin,
            asleep: false,
            last_fp: Vec::new(),
            spin: 0,
            prio: Priorities::new(max_spin),
            walk: streams.stream("dpor/walk"),
            draw: streams.stream("dpor/pick"),
            cap,
            fps: Vec::new(),
        }
    }

    /// The most states the tree held at once.
    pub fn peak_nodes(&self) -> usize {
        self.tree.peak
    }

    /// Backtrack choices not yet taken (each is at least one more
    /// schedule).
    pub fn choices_left(&self) -> usize {
        (0..self.tree.nodes.len() as u32)
            .filter(|&n| self.tree.nodes[n as usize].alive)
            .map(|n| self.tree.pending(n).count())
            .sum()
    }

    /// The sleep set of a new state after the current path's last choice
    /// (which has run): the parent's sleep set and the parent's choices
    /// explored before, each with the footprint it had there, less those
    /// whose footprint conflicts with the choice's. A choice whose
    /// footprint is unknown never sleeps.
    fn sleep_below(&self) -> Vec<(Action, u32)> {
        let Some(&(p, i)) = self.path.last() else {
            return Vec::new();
        };
        let t = &self.tree;
        let node = &t.nodes[p as usize];
        let list = t.enabled(p);
        let taken = &t.fps[*self.fps.last().expect("the last choice ran") as usize];
        let mut s: Vec<(Action, u32)> = t.sleeps[node.sleep as usize]
            .iter()
            .copied()
            .chain(
                (0..list.len())
                    .filter(|&j| j != i as usize && node.choices.done(j))
                    .filter_map(|j| t.fp_of(p, j).map(|f| (list[j], f))),
            )
            .filter(|&(_, f)| !t.fps[f as usize].conflicts(taken))
            .collect();
        s.sort();
        s.dedup_by_key(|e| e.0);
        s
    }

    /// Race analysis of the schedule just run (`ended`: what was enabled
    /// where it stopped), from the footprints its actions recorded:
    /// - every race `(i, k)` with `k` from the replayed prefix's end on
    ///   ([`Hb::build`]; races among earlier actions were analysed with the
    ///   schedules before) gets one of its initials into the backtrack set
    ///   of state `i`, unless one is there already (source-DPOR, Abdulla et
    ///   al. 2014, Algorithm 1);
    /// - every action enabled at a state and never taken after it in the
    ///   schedule (disabled, or cut off where the schedule stopped), whose
    ///   footprint is then the one known before it runs
    ///   ([`super::footprint::footprint`]), is added, as Flanagan and
    ///   Godefroid's algorithm adds a process's next transition, at the
    ///   last earlier choice it conflicts with that does not happen before
    ///   its process (if it was not enabled there, every action enabled
    ///   there is).
    fn analyse(&mut self, ended: &[Action]) {
        // The replayed prefix ends with the backtrack choice taken: its
        // last action is the first that differs from the schedules before.
        let from = self.replay.len().saturating_sub(1);
        let m = self.path.len();
        assert_eq!(m, self.fps.len(), "every choice ran");
        let actions: Vec<Action> = self
            .path
            .iter()
            .map(|&(n, i)| self.tree.enabled(n)[i as usize])
            .collect();
        let (hb, races) = {
            let fps: Vec<&Footprint> = self
                .fps
                .iter()
                .map(|&f| &self.tree.fps[f as usize])
                .collect();
            Hb::build(&actions, &fps, from)
        };
        for (i, k) in races {
            let initials = hb.initials(&actions, i, k);
            self.add_source(self.path[i].0, &initials);
        }
        self.add_unrun(&actions, &hb, ended);
        for d in (0..m).rev() {
            let n = self.path[d].0;
            self.tree.mark_open(n, d, &mut self.draw);
        }
    }

    /// One of `initials` into the backtrack set of state `n`, unless one
    /// is there: the first enabled there; if none is, every action is.
    fn add_source(&mut self, n: u32, initials: &[Action]) {
        let t = &mut self.tree;
        let list = &t.lists[t.nodes[n as usize].enabled as usize];
        let node = &mut t.nodes[n as usize];
        let at: Vec<usize> = initials
            .iter()
            .filter_map(|a| list.iter().position(|b| b == a))
            .collect();
        if at.iter().any(|&j| node.choices.in_backtrack(j)) {
            return;
        }
        match at.first() {
            Some(&j) => node.choices.insert(j, false),
            None => (0..list.len()).for_each(|j| node.choices.insert(j, false)),
        }
    }

    /// The second part of [`DporChooser::analyse`]: actions enabled at a
    /// state and never taken after it.
    fn add_unrun(&mut self, actions: &[Action], hb: &Hb, ended: &[Action]) {
        let m = actions.len();
        let mut last_run: BTreeMap<Action, usize> = BTreeMap::new();
        for (k, a) in actions.iter().enumerate() {
            last_run.insert(*a, k);
        }
        // Per action: the states after its last run where it is enabled.
        let mut windows: BTreeMap<Action, Vec<usize>> = BTreeMap::new();
        for j in 0..=m {
            let list = if j < m {
                self.tree.enabled(self.path[j].0)
            } else {
                ended
            };
            for b in list {
                if last_run.get(b).is_none_or(|&r| r < j) {
                    windows.entry(*b).or_default().push(j);
                }
            }
        }
        for (b, states) in windows {
            let f = footprint(&b);
            // Earlier choices it conflicts with that do not happen before
            // its process (the same for every state of the window: the
            // process does not run there).
            let conf: Vec<usize> = (0..m)
                .filter(|&i| actions[i] != b)
                .filter(|&i| f.conflicts(&self.tree.fps[self.fps[i] as usize]))
                .filter(|&i| !hb.before_process(i, &b, m))
                .collect();
            let mut at: Vec<usize> = states
                .iter()
                .filter_map(|&j| conf[..conf.partition_point(|&i| i < j)].last().copied())
                .collect();
            at.dedup();
            for i in at {
                let n = self.path[i].0;
                let t = &mut self.tree;
                let list = &t.lists[t.nodes[n as usize].enabled as usize];
                let node = &mut t.nodes[n as usize];
                match list.iter().position(|a| *a == b) {
                    Some(j) => node.choices.insert(j, false),
                    None => (0..list.len()).for_each(|j| node.choices.insert(j, false)),
                }
            }
        }
    }

    /// Frees the states of the schedule just run that have no choice
    /// left and no live children, from the last one up.
    fn free_finished(&mut self) {
        for d in (0..self.path.len()).rev() {
            let n = self.path[d].0;
            let node = &self.tree.nodes[n as usize];
            if node.children > 0 || self.tree.has_pending(n) {
                break;
            }
            self.tree.release(n);
        }
    }

    /// The state where the next schedule leaves the tree: at random, or
    /// the deepest of the last schedule's with a choice left while the
    /// tree is full.
    fn next_state(&mut self) -> Option<u32> {
        if self.tree.live >= self.cap {
            let deepest = self
                .path
                .iter()
                .rev()
                .map(|&(n, _)| n)
                .find(|&n| self.tree.nodes[n as usize].alive && self.tree.has_pending(n));
            if deepest.is_some() {
                return deepest;
            }
        }
        self.tree.shallowest_open()
    }

    /// Analyses the schedule just run (`ended`: what was enabled where it
    /// stopped) and prepares the next; false when the search is complete.
    pub fn advance(&mut self, ended: &[Action]) -> bool {
        self.analyse(ended);
        self.free_finished();
        let Some(n) = self.next_state() else {
            return false;
        };
        let choices: Vec<usize> = self.tree.pending(n).collect();
        let actions: Vec<Action> = choices.iter().map(|&j| self.tree.enabled(n)[j]).collect();
        let j = choices[pick(&mut self.draw, SPEC_PROB, &actions)];
        self.tree.nodes[n as usize].choices.insert(j, true);
        let mut replay = vec![(n, j as u32)];
        let mut cur = n;
        while self.tree.nodes[cur as usize].parent != NONE {
            let node = &self.tree.nodes[cur as usize];
            replay.push((node.parent, node.via));
            cur = node.parent;
        }
        replay.reverse();
        self.path = replay.clone();
        self.replay = replay;
        self.stop = None;
        (self.asleep, self.spin) = (false, 0);
        self.last_fp.clear();
        self.prio.clear();
        self.fps.clear();
        true
    }
}

impl Chooser for DporChooser {
    fn choose(&mut self, depth: usize, enabled: &[Action]) -> usize {
        if depth < self.replay.len() {
            let (n, i) = self.replay[depth];
            debug_assert_eq!(self.tree.enabled(n), enabled, "replay diverged at {depth}");
            assert_eq!(
                enabled.get(i as usize),
                self.tree.enabled(n).get(i as usize),
                "replay diverged at {depth} (the explorer is deterministic)"
            );
            return i as usize;
        }
        debug_assert_eq!(depth, self.path.len());
        let sleep = self.sleep_below();
        let awake: Vec<Action> = enabled
            .iter()
            .copied()
            .filter(|a| !sleep.iter().any(|s| s.0 == *a))
            .collect();
        if awake.is_empty() {
            self.stop = Some(Stop::Redundant);
            return 0;
        }
        self.asleep = awake.len() < enabled.len();
        if self.asleep && self.spin >= self.max_spin {
            self.stop = Some(Stop::Spinning);
            return 0;
        }
        let a = self.prio.choose(&mut self.walk, &awake);
        let taken = enabled.iter().position(|x| *x == a).expect("chosen");
        let (parent, via) = self.path.last().copied().unwrap_or((NONE, 0));
        let list = self.tree.intern(enabled);
        let sleep = self.tree.intern_sleep(&sleep);
        let n = self.tree.add(parent, via, list, sleep, taken);
        self.path.push((n, taken as u32));
        taken
    }

    fn stop(&self) -> Option<Stop> {
        self.stop
    }

    fn wants_footprints(&self) -> bool {
        true
    }

    fn executed(&mut self, footprint: &Footprint) {
        let f = self.tree.intern_fp(footprint);
        let (n, j) = self.path[self.fps.len()];
        self.tree.set_fp(n, j as usize, f);
        self.fps.push(f);
        let a = self.tree.enabled(n)[j as usize];
        let repeated = match self.last_fp.iter_mut().find(|(b, _)| *b == a) {
            Some((_, g)) => std::mem::replace(g, f) == f,
            None => {
                self.last_fp.push((a, f));
                false
            }
        };
        if self.fps.len() >= self.replay.len() {
            let (fps, last) = (&self.tree.fps, &self.last_fp);
            let next_of = |b| {
                last.iter()
                    .find(|(c, _)| *c == b)
                    .map(|&(_, g)| &fps[g as usize])
            };
            self.prio
                .ran(&mut self.walk, (a, repeated), &fps[f as usize], next_of);
        }
        self.spin = if std::mem::take(&mut self.asleep) && repeated {
            self.spin + 1
        } else {
            0
        };
    }
}

/// Runs one schedule with `dpor`; also returns what was enabled where it
/// stopped.
fn run_one(
    exp: &crate::config::Experiment,
    ropts: &crate::sim::RunOptions,
    opts: &CheckOptions,
    dpor: &mut DporChooser,
) -> Result<(OneRun, Vec<Action>), crate::sim::SimError> {
    let b = crate::sim::build(exp, ropts)?;
    let done = b.done();
    let mut e = Explorer::new(Rc::clone(&b.world), opts.speculation);
    e.add_vms(&b.guests);
    let outcome = e.run(dpor, opts.max_actions, &done);
    let ended = e.enabled();
    b.teardown();
    crate::progress::PROGRESS.schedule_done();
    Ok((OneRun::new(outcome, std::mem::take(&mut e.schedule)), ended))
}

/// The DPOR search: at most `opts.schedules` schedules (pruned ones
/// included), sequential. `exhausted` in the report: every class was run.
pub(super) fn search(
    exp: &crate::config::Experiment,
    ropts: &crate::sim::RunOptions,
    opts: &CheckOptions,
    streams: &Streams,
) -> Result<CheckReport, crate::sim::SimError> {
    search_until(exp, ropts, opts, streams, None)
}

/// [`search`] that also stops at `deadline` (wall clock), if given.
pub(super) fn search_until(
    exp: &crate::config::Experiment,
    ropts: &crate::sim::RunOptions,
    opts: &CheckOptions,
    streams: &Streams,
    deadline: Option<std::time::Instant>,
) -> Result<CheckReport, crate::sim::SimError> {
    let mut rep = CheckReport::default();
    let mut dpor = DporChooser::new(streams, MAX_TREE_NODES, opts.max_spin);
    while rep.schedules < opts.schedules {
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            rep.time_limited = true;
            break;
        }
        let (r, ended) = run_one(exp, ropts, opts, &mut dpor)?;
        if rep.add(rep.schedules, r) {
            break;
        }
        if !dpor.advance(&ended) {
            rep.exhausted = true;
            break;
        }
    }
    rep.dpor_peak_states = dpor.peak_nodes() as u64;
    // Stopped at --schedules: the next schedule was prepared, not run.
    let prepared = !rep.exhausted && rep.failure.is_none();
    rep.dpor_choices_left = (dpor.choices_left() + usize::from(prepared)) as u64;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::cpuid;
    use crate::hw::CpuId;

    /// Runs the DPOR search (tree cap `cap`) over a toy system in which
    /// each action of `actions` runs once, in any order; returns the
    /// orders explored.
    fn orders_with(actions: &[Action], cap: usize, seed: u64) -> Vec<Vec<Action>> {
        let mut dpor = DporChooser::new(&Streams::new(seed), cap, usize::MAX);
        let mut out = Vec::new();
        loop {
            let (run, left) = run_each_once(&mut dpor, actions);
            if dpor.stop.is_none() {
                out.push(run);
            }
            if !dpor.advance(&left) {
                return out;
            }
        }
    }

    /// One schedule of a toy system in which each of `actions` runs once,
    /// in the order `dpor` chooses: the order, and what was left when a
    /// sleep set stopped it (nothing if none did).
    fn run_each_once(dpor: &mut DporChooser, actions: &[Action]) -> (Vec<Action>, Vec<Action>) {
        let mut left = actions.to_vec();
        let mut run = Vec::new();
        while !left.is_empty() {
            let i = dpor.choose(run.len(), &left);
            if dpor.stop().is_some() {
                break;
            }
            dpor.executed(&footprint(&left[i]));
            run.push(left.remove(i));
        }
        (run, left)
    }

    fn orders(actions: &[Action]) -> Vec<Vec<Action>> {
        orders_with(actions, MAX_TREE_NODES, 1)
    }

    #[test]
    fn independent_actions_run_in_one_order_only() {
        // TLBIs reaching two different CPUs commute.
        let o = orders(&[Action::Deliver(cpuid(0)), Action::Deliver(cpuid(1))]);
        assert_eq!(o.len(), 1, "{o:?}");
    }

    #[test]
    fn dependent_actions_run_in_both_orders() {
        // Kernel steps of two CPUs (footprint unknown).
        let mut o = orders(&[Action::Step(cpuid(0)), Action::Step(cpuid(1))]);
        o.sort();
        assert_eq!(
            o,
            vec![
                vec![Action::Step(cpuid(0)), Action::Step(cpuid(1))],
                vec![Action::Step(cpuid(1)), Action::Step(cpuid(0))],
            ]
        );
        // A TLBI reaching CPU 0 and CPU 0's own speculative walk.
        let o = orders(&[
            Action::Deliver(cpuid(0)),
            Action::Speculate(cpuid(0), 0x1000),
        ]);
        assert_eq!(o.len(), 2, "{o:?}");
    }

    #[test]
    fn three_actions_give_one_order_per_class() {
        // d0 and d1 commute; p0 conflicts with d0 only: the classes are
        // fixed by the order of d0 and p0 (2 of them).
        let o = orders(&[
            Action::Deliver(cpuid(0)),
            Action::Deliver(cpuid(1)),
            Action::Speculate(cpuid(0), 0x1000),
        ]);
        assert_eq!(o.len(), 2, "{o:?}");
    }

    /// Every order of `n` mutually dependent steps, whatever the seed and
    /// however small the tree: the order of the search changes, its
    /// completeness does not.
    #[test]
    fn every_order_of_dependent_steps_is_run_once_under_any_seed_and_cap() {
        let steps: Vec<Action> = CpuId::all(4).map(Action::Step).collect();
        for cap in [1, 3, MAX_TREE_NODES] {
            for seed in 1..4 {
                let mut o = orders_with(&steps, cap, seed);
                let n = o.len();
                o.sort();
                o.dedup();
                assert_eq!((n, o.len()), (24, 24), "cap {cap} seed {seed}");
            }
        }
    }

    /// A toy process: its action, its number of transitions, and the
    /// process whose first transition enables it (if any).
    type Proc = (Action, usize, Option<Action>);

    /// The actions enabled when the processes have `left` transitions
    /// left.
    fn toy_enabled(procs: &[Proc], left: &[usize]) -> Vec<Action> {
        let started = |a: Action| {
            let k = procs.iter().position(|p| p.0 == a).unwrap();
            left[k] < procs[k].1
        };
        (0..procs.len())
            .filter(|&k| left[k] > 0 && procs[k].2.is_none_or(started))
            .map(|k| procs[k].0)
            .collect()
    }

    /// Runs the DPOR search over the toy system `procs`; returns the
    /// complete schedules run.
    fn runs(procs: &[Proc], cap: usize, seed: u64) -> Vec<Vec<Action>> {
        let mut dpor = DporChooser::new(&Streams::new(seed), cap, usize::MAX);
        let mut out = Vec::new();
        loop {
            let mut left: Vec<usize> = procs.iter().map(|p| p.1).collect();
            let mut run = Vec::new();
            loop {
                let enabled = toy_enabled(procs, &left);
                if enabled.is_empty() {
                    out.push(run);
                    break;
                }
                let i = dpor.choose(run.len(), &enabled);
                if dpor.stop().is_some() {
                    break;
                }
                dpor.executed(&footprint(&enabled[i]));
                left[procs.iter().position(|p| p.0 == enabled[i]).unwrap()] -= 1;
                run.push(enabled[i]);
            }
            if !dpor.advance(&toy_enabled(procs, &left)) {
                return out;
            }
        }
    }

    /// The class of `run` by the footprints known before the actions
    /// run ([`footprint`]).
    fn class(run: &[Action]) -> Vec<Action> {
        let fps: Vec<Footprint> = run.iter().map(footprint).collect();
        super::super::races::normal_form(run, &fps.iter().collect::<Vec<_>>())
    }

    /// Every complete schedule of `procs` from `left`.
    fn every_run(procs: &[Proc], left: &[usize]) -> Vec<Vec<Action>> {
        let enabled = toy_enabled(procs, left);
        if enabled.is_empty() {
            return vec![Vec::new()];
        }
        let mut out = Vec::new();
        for a in enabled {
            let mut rest = left.to_vec();
            rest[procs.iter().position(|p| p.0 == a).unwrap()] -= 1;
            for mut r in every_run(procs, &rest) {
                r.insert(0, a);
                out.push(r);
            }
        }
        out
    }

    /// Completeness against brute force: over toy systems with commuting
    /// and conflicting processes of several transitions each, one of
    /// them enabled by another's first step, the schedules DPOR runs
    /// cover every class of equivalent schedules, under every seed and
    /// tree cap tried (the order of the search and its fallback to
    /// depth-first change nothing).
    #[test]
    fn every_class_is_covered_under_any_seed_and_cap() {
        let (d, p, s) = (Action::Deliver, Action::Speculate, Action::Step);
        let systems: [&[Proc]; 4] = [
            &[
                (d(cpuid(0)), 2, None),
                (d(cpuid(1)), 2, None),
                (p(cpuid(0), 0x1000), 1, None),
                (s(cpuid(2)), 1, None),
            ],
            &[
                (d(cpuid(0)), 1, None),
                (d(cpuid(1)), 1, None),
                (d(cpuid(2)), 1, None),
                (p(cpuid(0), 0x1000), 1, None),
                (p(cpuid(1), 0x1000), 1, None),
            ],
            &[
                (d(cpuid(0)), 2, None),
                (d(cpuid(1)), 1, None),
                (p(cpuid(1), 0x2000), 2, None),
            ],
            // d1 only once s2 has run: the analysis must back-track at a
            // state where the racing action was not yet enabled.
            &[
                (p(cpuid(1), 0x1000), 1, None),
                (s(cpuid(2)), 1, None),
                (d(cpuid(1)), 1, Some(s(cpuid(2)))),
                (d(cpuid(0)), 2, None),
            ],
        ];
        for procs in systems {
            let left: Vec<usize> = procs.iter().map(|p| p.1).collect();
            let all: std::collections::BTreeSet<Vec<Action>> =
                every_run(procs, &left).iter().map(|r| class(r)).collect();
            for cap in [1, 4, MAX_TREE_NODES] {
                for seed in 1..6 {
                    let got: std::collections::BTreeSet<Vec<Action>> =
                        runs(procs, cap, seed).iter().map(|r| class(r)).collect();
                    assert_eq!(got, all, "{procs:?} cap {cap} seed {seed}");
                }
            }
        }
    }

    /// The order: each schedule leaves the tree at the shallowest
    /// choice left then (choices are found as races are, so a later one
    /// may be shallower), so the schedules differ near their start before
    /// they differ near their end (depth-first order would reorder the
    /// last two steps first).
    #[test]
    fn the_next_schedule_leaves_the_tree_at_its_shallowest_choice() {
        let steps: Vec<Action> = CpuId::all(4).map(Action::Step).collect();
        let mut dpor = DporChooser::new(&Streams::new(1), MAX_TREE_NODES, usize::MAX);
        let depth = |t: &Tree, mut n: u32| {
            let mut d = 0;
            while t.nodes[n as usize].parent != NONE {
                n = t.nodes[n as usize].parent;
                d += 1;
            }
            d
        };
        let mut leaves = Vec::new();
        loop {
            let (_, left) = run_each_once(&mut dpor, &steps);
            if !dpor.advance(&left) {
                break;
            }
            let here = dpor.replay.len() - 1;
            let t = &dpor.tree;
            let open = (0..t.nodes.len() as u32)
                .filter(|&n| t.nodes[n as usize].alive && t.has_pending(n))
                .map(|n| depth(t, n))
                .min();
            assert!(
                open.is_none_or(|d| d >= here),
                "left at {here}, open at {open:?}"
            );
            leaves.push(here);
        }
        assert_eq!(leaves.len(), 23);
        // Depth-first order would leave the first schedule at depth 2 (its
        // last two steps reordered).
        assert_eq!(leaves[0], 0);
    }

    /// The tree frees finished subtrees: once the search is complete,
    /// nothing is left; with a cap, it never holds much more than one
    /// schedule's states beyond it.
    #[test]
    fn the_tree_is_freed_as_subtrees_finish_and_stays_near_its_cap() {
        let steps: Vec<Action> = CpuId::all(5).map(Action::Step).collect();
        let mut dpor = DporChooser::new(&Streams::new(1), 8, usize::MAX);
        loop {
            let (_, left) = run_each_once(&mut dpor, &steps);
            if !dpor.advance(&left) {
                break;
            }
        }
        assert_eq!(dpor.tree.live, 0);
        assert_eq!(dpor.choices_left(), 0);
        assert!(
            dpor.peak_nodes() <= 8 + steps.len(),
            "{}",
            dpor.peak_nodes()
        );
    }

    /// Runs DPOR over a toy spin loop: process `s0` reads a flag each
    /// turn until `s1`'s second step has set it (and writes a location of
    /// its own); `s1` first writes a location of its own, then the flag.
    /// Schedules are cut at 60 actions (the loop has a class for every
    /// number of turns). Returns the actions run, the complete schedules'
    /// classes, and how many schedules were cut by spinning.
    fn spin_toy(max_spin: usize) -> (usize, std::collections::BTreeSet<Vec<Action>>, usize) {
        use crate::engine::track::{part, Loc, Space};
        let loc = |p| Loc::part(Space::Hw, p);
        let (flag, mine, other) = (loc(part::tlb(2)), loc(part::tlb(0)), loc(part::tlb(1)));
        let (a, b) = (Action::Step(CpuId::new(0)), Action::Step(CpuId::new(1)));
        let spin = Footprint::of(&[flag], &[mine]);
        let (b1, b2) = (Footprint::of(&[], &[other]), Footprint::of(&[], &[flag]));
        let enabled = |b_steps: usize, a_done: bool| {
            let mut e = Vec::new();
            e.extend((!a_done).then_some(a));
            e.extend((b_steps < 2).then_some(b));
            e
        };
        let mut dpor = DporChooser::new(&Streams::new(1), MAX_TREE_NODES, max_spin);
        let (mut actions, mut classes, mut spun) = (0, std::collections::BTreeSet::new(), 0);
        loop {
            let (mut run, mut fps, mut b_steps, mut a_done) = (Vec::new(), Vec::new(), 0, false);
            while run.len() < 60 {
                let e = enabled(b_steps, a_done);
                if e.is_empty() {
                    let fps: Vec<&Footprint> = fps.iter().collect();
                    classes.insert(super::super::races::normal_form(&run, &fps));
                    break;
                }
                let i = dpor.choose(run.len(), &e);
                if dpor.stop().is_some() {
                    spun += usize::from(dpor.stop() == Some(Stop::Spinning));
                    break;
                }
                let fp = if e[i] == a {
                    a_done = b_steps == 2;
                    spin.clone()
                } else {
                    b_steps += 1;
                    [b1.clone(), b2.clone()][b_steps - 1].clone()
                };
                dpor.executed(&fp);
                run.push(e[i]);
                fps.push(fp);
            }
            actions += run.len();
            if !dpor.advance(&enabled(b_steps, a_done)) {
                return (actions, classes, spun);
            }
        }
    }

    /// A spin loop waiting for a process whose next action sleeps (its
    /// every order was explored from an earlier state) is cut after
    /// `max_spin` turns, and the search still ends with every
    /// class of complete schedules it found uncut, in fewer actions.
    #[test]
    fn a_spin_loop_waiting_for_a_sleeping_process_is_cut() {
        let (uncut_actions, all, none) = spin_toy(usize::MAX);
        assert_eq!(none, 0);
        let (actions, classes, spun) = spin_toy(5);
        assert!(
            spun > 0 && actions < uncut_actions,
            "{spun} {actions} {uncut_actions}"
        );
        assert_eq!(classes, all);
        assert!(all.len() > 50, "{}", all.len());
    }
}
