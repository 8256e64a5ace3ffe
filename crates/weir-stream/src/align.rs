//! [`Aligner`]: barrier alignment for a task with several inputs.
//!
//! A barrier for epoch E travels in-band behind the last record of E on
//! every input. A task that reads several inputs must not let records of
//! E+1 from a fast input reach its operators before a slow input has
//! delivered all of E, or the state it snapshots at E would mix two
//! epochs. So once an input has delivered `Barrier(E)` it is *blocked*:
//! the task stops reading it (its records wait in its bounded channel,
//! which in turn slows its producer) until every input has delivered
//! `Barrier(E)`. Then the epoch is aligned, the task snapshots its state
//! and every input is read again.

use std::collections::BTreeMap;

/// Which inputs of a task have delivered the barrier being aligned.
#[derive(Debug)]
pub struct Aligner<I> {
    /// Every input, and whether it has delivered the current barrier.
    inputs: BTreeMap<I, bool>,
    /// The epoch whose barrier is being aligned, once one input has it.
    aligning: Option<u64>,
}

impl<I: Ord + Clone + std::fmt::Debug> Default for Aligner<I> {
    fn default() -> Self {
        Aligner {
            inputs: BTreeMap::new(),
            aligning: None,
        }
    }
}

/// An input delivered a barrier out of order: a bug in its producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BarrierMismatch {
    /// The epoch being aligned.
    pub expected: u64,
    /// The epoch that arrived.
    pub got: u64,
}

impl<I: Ord + Clone + std::fmt::Debug> Aligner<I> {
    /// Adds an input. An input added mid-alignment takes part from the
    /// next barrier on (it was created after this one was injected), and
    /// waits like the inputs that already delivered this one.
    pub fn add_input(&mut self, input: I) {
        let done = self.aligning.is_some();
        self.inputs.insert(input, done);
    }

    /// Removes an input. Returns the aligned epoch if the removed input
    /// was the last one alignment waited for.
    pub fn remove_input(&mut self, input: &I) -> Option<u64> {
        self.inputs.remove(input);
        self.complete()
    }

    /// Whether records of `input` must wait: it delivered the barrier
    /// being aligned and others have not yet.
    pub fn is_blocked(&self, input: &I) -> bool {
        self.aligning.is_some() && self.inputs.get(input).copied().unwrap_or(false)
    }

    /// The epoch being aligned, if any.
    pub fn aligning(&self) -> Option<u64> {
        self.aligning
    }

    /// Records that `input` delivered `Barrier(epoch)`. Returns the epoch
    /// once every input has delivered it: then the task snapshots and all
    /// inputs are unblocked.
    pub fn on_barrier(&mut self, input: &I, epoch: u64) -> Result<Option<u64>, BarrierMismatch> {
        match self.aligning {
            Some(expected) if expected != epoch => {
                return Err(BarrierMismatch {
                    expected,
                    got: epoch,
                })
            }
            _ => self.aligning = Some(epoch),
        }
        if let Some(done) = self.inputs.get_mut(input) {
            *done = true;
        }
        Ok(self.complete())
    }

    /// Ends the alignment if every input has its barrier.
    fn complete(&mut self) -> Option<u64> {
        let epoch = self.aligning?;
        if !self.inputs.values().all(|&done| done) {
            return None;
        }
        self.aligning = None;
        self.inputs.values_mut().for_each(|done| *done = false);
        Some(epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone, PartialEq)]
    enum Msg {
        Record(u64),
        Barrier(u64),
    }

    /// Reads inputs round-robin, `speed[i]` messages at a time, skipping
    /// blocked inputs; returns the records processed per aligned epoch.
    fn run(mut inputs: Vec<VecDeque<Msg>>, speed: &[usize]) -> Vec<(u64, Vec<u64>)> {
        let mut aligner = Aligner::default();
        for i in 0..inputs.len() {
            aligner.add_input(i);
        }
        let mut epochs = Vec::new();
        let mut current = Vec::new();
        while inputs.iter().any(|q| !q.is_empty()) {
            for (i, queue) in inputs.iter_mut().enumerate() {
                for _ in 0..speed[i] {
                    if aligner.is_blocked(&i) {
                        break;
                    }
                    match queue.pop_front() {
                        Some(Msg::Record(r)) => current.push(r),
                        Some(Msg::Barrier(e)) => {
                            if let Some(epoch) = aligner.on_barrier(&i, e).unwrap() {
                                epochs.push((epoch, std::mem::take(&mut current)));
                            }
                        }
                        None => break,
                    }
                }
            }
        }
        epochs
    }

    /// Records tagged `epoch * 1000 + n`, then the epoch's barrier.
    fn input(epochs: u64, per_epoch: u64) -> VecDeque<Msg> {
        (1..=epochs)
            .flat_map(|e| {
                (0..per_epoch)
                    .map(move |n| Msg::Record(e * 1000 + n))
                    .chain([Msg::Barrier(e)])
            })
            .collect()
    }

    #[test]
    fn a_fast_input_waits_for_a_slow_one_at_every_barrier() {
        // One input is 50 times faster and carries 40 times the records.
        let epochs = run(vec![input(5, 200), input(5, 5)], &[50, 1]);
        assert_eq!(epochs.len(), 5);
        for (epoch, records) in epochs {
            assert_eq!(records.len(), 205, "epoch {epoch} has all its records");
            assert!(
                records.iter().all(|r| r / 1000 == epoch),
                "epoch {epoch} mixes records of another epoch"
            );
        }
    }

    #[test]
    fn without_blocking_epochs_would_mix() {
        // The same inputs read by a task that ignores alignment: the
        // check above is able to fail.
        let mut inputs = [input(3, 100), input(3, 2)];
        let mut seen_barrier = [0u64; 2];
        let mut mixed = false;
        while inputs.iter().any(|q| !q.is_empty()) {
            for (i, queue) in inputs.iter_mut().enumerate() {
                for _ in 0..[50, 1][i] {
                    match queue.pop_front() {
                        Some(Msg::Record(r)) => {
                            mixed |= r / 1000 > seen_barrier.iter().copied().min().unwrap() + 1
                        }
                        Some(Msg::Barrier(e)) => seen_barrier[i] = e,
                        None => break,
                    }
                }
            }
        }
        assert!(mixed);
    }

    #[test]
    fn inputs_added_mid_alignment_join_at_the_next_barrier() {
        let mut aligner = Aligner::default();
        aligner.add_input("a");
        aligner.add_input("b");
        assert_eq!(aligner.on_barrier(&"a", 1), Ok(None));
        assert!(aligner.is_blocked(&"a"));
        aligner.add_input("c");
        assert!(aligner.is_blocked(&"c"));
        assert_eq!(aligner.on_barrier(&"b", 1), Ok(Some(1)));
        assert!(!aligner.is_blocked(&"a"));
        assert_eq!(aligner.on_barrier(&"a", 2), Ok(None));
        assert_eq!(aligner.on_barrier(&"b", 2), Ok(None));
        assert_eq!(aligner.remove_input(&"c"), Some(2));
        assert_eq!(
            aligner
                .on_barrier(&"a", 4)
                .and_then(|_| aligner.on_barrier(&"b", 5)),
            Err(BarrierMismatch {
                expected: 4,
                got: 5
            })
        );
    }
}
