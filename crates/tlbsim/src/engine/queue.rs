//! Event queue ordered by `(time, sequence)`: ties are first-in first-out.
//! Cancellation is lazy: a cancelled event stays queued and is skipped when
//! popped (nexosim's scheme).
//!
//! Fast path: the earliest event is kept out of the heap while it is the
//! earliest, so an event pushed ahead of everything queued (a CPU's next
//! step that ends before any other event) is popped without a heap push
//! and pop. The order is the same as with the heap alone.

use super::Ns;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A priority queue of events of type `E`.
#[derive(Debug)]
pub struct EventQueue<E> {
    /// Keys `(time, sequence, slot)` of the queued events but `front`.
    heap: BinaryHeap<Reverse<Key>>,
    /// The key that orders before every key in `heap`, if kept out of it.
    front: Option<Key>,
    slots: Vec<Option<(u64, E)>>,
    free: Vec<usize>,
    seq: u64,
}

/// `(time, sequence, slot)`: ordered by time, then sequence (unique).
type Key = (Ns, u64, usize);

/// Handle of a scheduled event, used to cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId(usize, u64);

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
        let item = Some((self.seq, ev));
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = item;
                s
            }
            None => {
                self.slots.push(item);
                self.slots.len() - 1
            }
        };
        let key = (at_ns, self.seq, slot);
        match self.front {
            Some(f) if key < f => {
                self.heap.push(Reverse(f));
                self.front = Some(key);
            }
            Some(_) => self.heap.push(Reverse(key)),
            None if self.heap.peek().is_none_or(|Reverse(h)| key < *h) => {
                self.front = Some(key);
            }
            None => self.heap.push(Reverse(key)),
        }
        EventId(slot, self.seq)
    }

    /// Cancels a scheduled event; a no-op if it already fired.
    pub fn cancel(&mut self, id: EventId) {
        if let Some(s) = self.slots.get_mut(id.0) {
            if matches!(s, Some((seq, _)) if *seq == id.1) {
                *s = None;
            }
        }
    }

    /// Pops the earliest live event, with its time.
    pub fn pop(&mut self) -> Option<(Ns, E)> {
        while let Some((t, key_seq, slot)) =
            self.front.take().or_else(|| self.heap.pop().map(|r| r.0))
        {
            match self.slots[slot].take() {
                Some((seq, ev)) if seq == key_seq => {
                    self.free.push(slot);
                    return Some((t, ev));
                }
                Some(other) => self.slots[slot] = Some(other),
                None => self.free.push(slot),
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
        let mut rng = crate::engine::rng::Streams::new(1).stream("queue-test");
        let mut next = |n: u64| rand::Rng::gen_range(&mut rng, 0..n);
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
