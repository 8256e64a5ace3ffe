//! Weir's streaming engine: the change data model (Z-sets of Arrow rows),
//! incremental operators, and the dataflow that runs a view's operators
//! epoch by epoch.
//!
//! An operator is a state machine: it takes a batch of [`Changes`] on an
//! input port and returns the changes of its output. Its durable state is a
//! set of [`Multiset`]s whose per-epoch deltas are checkpointed with the
//! epoch that produced them. Nothing here knows about sessions, SQL text or
//! the object store.

mod aggregate;
mod changes;
mod dataflow;
mod join;
mod map;
mod multiset;
mod operator;
mod plan;
mod running;
mod top_n;
mod union;

#[cfg(test)]
mod testing;

pub use changes::Changes;
pub use dataflow::Dataflow;
pub use multiset::Multiset;
pub use operator::Operator;
pub use plan::{AggregateSpec, JoinSpec, NodeKind, NodeSpec, StreamPlan, TopNSpec};

/// Errors of the streaming engine are DataFusion's: expressions fail with
/// them, and the server already maps them to SQLSTATEs.
pub type Result<T> = datafusion::error::Result<T>;
