//! Sinks: where a sink's output changes go, epoch by epoch, instead of
//! into an output table that reads see.
//!
//! A sink (`CREATE SINK name AS query WITH (connector = ...)`) runs as a
//! view does: the same operators, state, checkpoints and recovery. Its
//! output changes are written to its [`Sink`] as they come, and the sink
//! hears of each epoch's cut; its output table stays empty. Only the
//! coordinator holds sinks: a partitioned view's output comes back to it.

use crate::{Changes, Result};

/// Takes a sink's output changes (see the module documentation).
pub trait Sink: Send + std::fmt::Debug {
    /// Takes output changes of the open epoch, in the order they came.
    fn write(&mut self, changes: &Changes) -> Result<()>;

    /// Epoch `epoch` is cut: every change of it has been written.
    fn cut(&mut self, epoch: u64) -> Result<()>;
}

/// Discards everything (Flink's and RisingWave's `blackhole`): a query
/// whose output is the whole stream runs without its output being kept.
/// What it took is counted in the runtime's view counters.
#[derive(Debug, Default)]
pub struct Blackhole;

impl Sink for Blackhole {
    fn write(&mut self, _changes: &Changes) -> Result<()> {
        Ok(())
    }

    fn cut(&mut self, _epoch: u64) -> Result<()> {
        Ok(())
    }
}
