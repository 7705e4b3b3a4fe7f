//! A binary heap ordered by a comparison supplied at each call, because the order of jobs
//! and queues depends on session state (shares, readiness) that changes as the cycle runs.
//! As in Volcano, an element's position is fixed when it is pushed; an element whose order
//! may have changed is popped and pushed again.

use std::cmp::Ordering;

#[derive(Debug)]
pub struct OrderedQueue<T> {
    heap: Vec<T>,
}

impl<T> Default for OrderedQueue<T> {
    fn default() -> Self {
        Self { heap: Vec::new() }
    }
}

impl<T: Copy> OrderedQueue<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// `cmp(a, b) == Less` means `a` comes out first.
    pub fn push(&mut self, item: T, cmp: impl Fn(T, T) -> Ordering) {
        self.heap.push(item);
        let mut i = self.heap.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if cmp(self.heap[i], self.heap[parent]) == Ordering::Less {
                self.heap.swap(i, parent);
                i = parent;
            } else {
                break;
            }
        }
    }

    pub fn pop(&mut self, cmp: impl Fn(T, T) -> Ordering) -> Option<T> {
        if self.heap.is_empty() {
            return None;
        }
        let last = self.heap.len() - 1;
        self.heap.swap(0, last);
        let top = self.heap.pop();
        let n = self.heap.len();
        let mut i = 0;
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut best = i;
            if l < n && cmp(self.heap[l], self.heap[best]) == Ordering::Less {
                best = l;
            }
            if r < n && cmp(self.heap[r], self.heap[best]) == Ordering::Less {
                best = r;
            }
            if best == i {
                break;
            }
            self.heap.swap(i, best);
            i = best;
        }
        top
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn pops_in_comparison_order(items in proptest::collection::vec(0u32..1000, 0..200)) {
            let mut q = OrderedQueue::new();
            for &i in &items {
                q.push(i, |a: u32, b: u32| a.cmp(&b));
            }
            let mut out = Vec::new();
            while let Some(i) = q.pop(|a: u32, b: u32| a.cmp(&b)) {
                out.push(i);
            }
            let mut sorted = items.clone();
            sorted.sort();
            proptest::prop_assert_eq!(out, sorted);
        }
    }
}
