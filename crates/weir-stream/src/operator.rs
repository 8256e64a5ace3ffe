//! The operator interface.

use crate::{Changes, Multiset, Result};

/// An incremental operator: a state machine from input changes to output
/// changes. It keeps `output = query(inputs)` true as a Z-set after every
/// call. The runtime owns scheduling; operators never block or spawn.
pub trait Operator: Send + std::fmt::Debug {
    /// Output emitted once, when the view is created, before any input:
    /// constant rows, or the one row of a global aggregate over nothing.
    fn initial(&mut self) -> Result<Vec<Changes>> {
        Ok(Vec::new())
    }

    /// Takes `input` on `port` (0 for the first input) and returns the
    /// resulting changes of the output.
    fn process(&mut self, port: usize, input: Changes) -> Result<Vec<Changes>>;

    /// The durable state, always in the same order; the runtime
    /// checkpoints each bag's delta at every barrier.
    fn state(&mut self) -> Vec<&mut Multiset> {
        Vec::new()
    }

    /// Brings [`Operator::state`] up to date with what the operator keeps
    /// in a faster form; the runtime calls it before taking a checkpoint.
    fn sync_state(&mut self) -> Result<()> {
        Ok(())
    }

    /// Called after recovery has loaded [`Operator::state`]: rebuilds
    /// whatever the operator derives from it.
    fn restored(&mut self) -> Result<()> {
        Ok(())
    }
}
