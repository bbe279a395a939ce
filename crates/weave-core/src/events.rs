//! A deterministic event queue: events pop in (time, class, key, sequence) order, so
//! same-instant events are processed by class, then by an optional key, then in the order
//! they were scheduled.

use crate::units::Micros;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<E> {
    time: Micros,
    class: u8,
    key: u64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.class, self.key, self.seq) == (o.time, o.class, o.key, o.seq)
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl<E> Ord for Entry<E> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.class, o.key, o.seq).cmp(&(self.time, self.class, self.key, self.seq))
    }
}

pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { heap: BinaryHeap::new(), next_seq: 0 }
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `event` at `time`; lower `class` goes first among same-time events, then
    /// the order of scheduling.
    pub fn push(&mut self, time: Micros, class: u8, event: E) {
        self.push_keyed(time, class, 0, event);
    }

    /// Like [`EventQueue::push`], with an explicit tie-break `key` (e.g. a job id) between
    /// the class and the order of scheduling.
    pub fn push_keyed(&mut self, time: Micros, class: u8, key: u64, event: E) {
        self.next_seq += 1;
        self.heap.push(Entry { time, class, key, seq: self.next_seq, event });
    }

    pub fn pop(&mut self) -> Option<(Micros, E)> {
        self.heap.pop().map(|e| (e.time, e.event))
    }

    pub fn peek_time(&self) -> Option<Micros> {
        self.heap.peek().map(|e| e.time)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_class_then_sequence() {
        let mut q = EventQueue::new();
        q.push(Micros(5), 1, "b");
        q.push(Micros(5), 0, "a");
        q.push(Micros(1), 9, "first");
        q.push(Micros(5), 1, "c");
        let order: Vec<&str> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ["first", "a", "b", "c"]);
    }
}
