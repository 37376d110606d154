//! Event queue ordered by `(time, sequence)`: ties are first-in first-out.
//! Cancellation is lazy: a cancelled event stays queued and is skipped when
//! popped (nexosim's scheme).

use super::Ns;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A priority queue of events of type `E`.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<(Ns, u64, usize)>>,
    slots: Vec<Option<(u64, E)>>,
    free: Vec<usize>,
    seq: u64,
}

/// Handle of a scheduled event, used to cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId(usize, u64);

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
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
        self.heap.push(Reverse((at_ns, self.seq, slot)));
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
        while let Some(Reverse((t, _seq, slot))) = self.heap.pop() {
            match self.slots[slot].take() {
                Some((seq, ev)) if seq == _seq => {
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
        self.heap.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
}
