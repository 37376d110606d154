//! Event queue ordered by `(time, sequence)`: ties are first-in first-out.
//! Cancellation is lazy: a cancelled event stays queued and is skipped when
//! popped (nexosim's scheme).
//!
//! Fast path: the earliest event is kept out of the heap while it is the
//! earliest, so an event pushed ahead of everything queued (a CPU's next
//! step that ends before any other event) is popped without a heap push
//! and pop. The order is the same as with the heap alone.

use super::Ns;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A queued event: its key `(time, sequence)`, the slot that says whether
/// it is still live, and the event itself (kept inline: no indirection on
/// the way out).
#[derive(Debug)]
struct Entry<E> {
    at_ns: Ns,
    seq: u64,
    slot: u32,
    ev: E,
}

impl<E> Entry<E> {
    fn key(&self) -> (Ns, u64) {
        (self.at_ns, self.seq)
    }
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl<E> Ord for Entry<E> {
    /// Reversed, so that the max-heap pops the earliest key.
    fn cmp(&self, o: &Self) -> Ordering {
        o.key().cmp(&self.key())
    }
}

/// A priority queue of events of type `E`.
#[derive(Debug)]
pub struct EventQueue<E> {
    /// The queued events but `front`.
    heap: BinaryHeap<Entry<E>>,
    /// The event that orders before every event in `heap`, if kept out of
    /// it.
    front: Option<Entry<E>>,
    /// Per slot: the sequence number of the live event holding it, 0 once
    /// cancelled (the slot is freed when its entry comes out).
    slots: Vec<u64>,
    free: Vec<u32>,
    seq: u64,
}

/// Handle of a scheduled event, used to cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId(u32, u64);

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            front: None,
            slots: Vec::new(),
            free: Vec::new(),
            seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedules `ev` at absolute time `at_ns`.
    pub fn push(&mut self, at_ns: Ns, ev: E) -> EventId {
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = self.seq;
                s
            }
            None => {
                self.slots.push(self.seq);
                u32::try_from(self.slots.len() - 1).expect("under 2^32 queued events")
            }
        };
        let e = Entry {
            at_ns,
            seq: self.seq,
            slot,
            ev,
        };
        match &self.front {
            Some(f) if e.key() < f.key() => {
                let f = self.front.replace(e).expect("front");
                self.heap.push(f);
            }
            Some(_) => self.heap.push(e),
            None if self.heap.peek().is_none_or(|h| e.key() < h.key()) => {
                self.front = Some(e);
            }
            None => self.heap.push(e),
        }
        EventId(slot, self.seq)
    }

    /// Cancels a scheduled event; a no-op if it already fired.
    pub fn cancel(&mut self, id: EventId) {
        if let Some(s) = self.slots.get_mut(id.0 as usize) {
            if *s == id.1 {
                *s = 0;
            }
        }
    }

    /// Pops the earliest live event, with its time.
    pub fn pop(&mut self) -> Option<(Ns, E)> {
        while let Some(e) = self.front.take().or_else(|| self.heap.pop()) {
            let live = std::mem::take(&mut self.slots[e.slot as usize]) == e.seq;
            self.free.push(e.slot);
            if live {
                return Some((e.at_ns, e.ev));
            }
        }
        None
    }

    /// Number of queued entries, including lazily cancelled ones.
    pub fn len(&self) -> usize {
        self.heap.len() + usize::from(self.front.is_some())
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_are_fifo_and_time_ordered() {
        let mut q = EventQueue::default();
        q.push(10, "b");
        q.push(5, "a");
        q.push(10, "c");
        q.push(7, "x");
        let x = q.push(8, "cancelled");
        q.cancel(x);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(5, "a"), (7, "x"), (10, "b"), (10, "c")]);
    }

    #[test]
    fn pops_in_time_then_push_order_whatever_the_mix_of_pushes_pops_and_cancels() {
        let mut q = EventQueue::default();
        // The reference: every live event, popped by sorting (time, seq).
        let mut live: Vec<(Ns, u64, EventId)> = Vec::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut now, mut seq) = (0, 0);
        for _ in 0..20_000 {
            match next(10) {
                0..=4 => {
                    // Often ahead of everything queued (the fast path).
                    let at = now + next(4) * next(50);
                    seq += 1;
                    let id = q.push(at, seq);
                    live.push((at, seq, id));
                }
                5 if !live.is_empty() => {
                    let (_, _, id) = live.swap_remove(next(live.len() as u64) as usize);
                    q.cancel(id);
                }
                _ => {
                    live.sort_by_key(|&(t, s, _)| (t, s));
                    let want = (!live.is_empty()).then(|| live.remove(0));
                    let got = q.pop();
                    assert_eq!(got, want.map(|(t, s, _)| (t, s)));
                    if let Some((t, _)) = got {
                        now = t;
                    }
                }
            }
        }
    }
}
